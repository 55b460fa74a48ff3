"""The admin HTTP client against a local stub server: requests sent, answers decoded, typed failures."""

import socket

import pytest

from pantheon.ctl.client import AdminClient, Refused, Unavailable
from tests.pantheon.ctl.stub import DIES, HEALTH, MODELS, StubServer, error


@pytest.fixture
def stub():
    with StubServer() as s:
        yield s


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_get_models_with_token(stub):
    assert AdminClient(stub.url, token="s3cret").models() == MODELS
    (req,) = stub.requests
    assert (req["method"], req["path"]) == ("GET", "/admin/models")
    assert req["headers"]["Authorization"] == "Bearer s3cret"
    assert req["headers"]["Accept"] == "application/json"
    assert req["headers"]["User-Agent"].startswith("pantheon-ctl/")


def test_no_token_no_authorization_header(stub):
    assert AdminClient(stub.url).dies() == DIES
    assert "Authorization" not in stub.requests[0]["headers"]


def test_url_path_prefix(stub):
    stub.routes[("GET", "/pfx/admin/models")] = (200, MODELS)
    assert AdminClient(stub.url + "/pfx").models() == MODELS
    assert stub.requests[0]["path"] == "/pfx/admin/models"


def test_load_posts_every_field(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": MODELS["models"][1]})
    answer = AdminClient(stub.url).load("/m/big.gguf", name="big", dies=("cpu0", "cpu1"), ctx_cap=4096,
                                        batch_slots=2, timeout=60)
    assert answer == {"model": MODELS["models"][1]}
    (req,) = stub.requests
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["body"] == {"path": "/m/big.gguf", "name": "big", "dies": ["cpu0", "cpu1"], "ctx_cap": 4096,
                           "batch_slots": 2, "timeout": 60}


def test_load_unset_fields_are_null(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": {}})
    AdminClient(stub.url).load("a.gguf")
    assert stub.requests[0]["body"] == {"path": "a.gguf", "name": None, "dies": None, "ctx_cap": None,
                                        "batch_slots": None, "timeout": None}


def test_unload_body(stub):
    stub.routes[("POST", "/admin/models/unload")] = (200, {"model": {"name": "big"}, "aborted": 1})
    assert AdminClient(stub.url).unload("big", timeout=5)["aborted"] == 1
    assert stub.requests[0]["body"] == {"name": "big", "timeout": 5}


@pytest.mark.parametrize("status,code", [(400, "invalid_path"), (401, "invalid_admin_token"),
                                         (403, "admin_disabled"), (404, "model_not_found"), (409, "name_exists"),
                                         (422, "load_failed")])
def test_4xx_is_refused_with_the_servers_message(stub, status, code):
    stub.routes[("POST", "/admin/models/load")] = error(status, f"because {code}", code)
    with pytest.raises(Refused) as e:
        AdminClient(stub.url).load("x.gguf")
    assert (e.value.status, e.value.code) == (status, code)
    assert str(e.value) == f"HTTP {status} {code}: because {code}"
    assert e.value.body["error"]["message"] == f"because {code}"


def test_does_not_fit_carries_the_estimate(stub):
    stub.routes[("POST", "/admin/models/load")] = error(409, "big does not fit", "does_not_fit",
                                                        estimate={"need_bytes": 10, "available_bytes": 5})
    with pytest.raises(Refused) as e:
        AdminClient(stub.url).load("big.gguf")
    assert e.value.error["estimate"] == {"need_bytes": 10, "available_bytes": 5}


@pytest.mark.parametrize("status", [500, 503, 504])
def test_5xx_is_unavailable(stub, status):
    stub.routes[("GET", "/admin/models")] = error(status, "worker died", "internal_error", "server_error")
    with pytest.raises(Unavailable) as e:
        AdminClient(stub.url).models()
    assert e.value.status == status
    assert "worker died" in str(e.value)


def test_html_error_page_is_quoted(stub):
    stub.routes[("GET", "/admin/models")] = (502, "<html>Bad Gateway</html>")
    with pytest.raises(Unavailable, match=r"HTTP 502 from /admin/models: <html>Bad Gateway</html>"):
        AdminClient(stub.url).models()


def test_html_4xx_is_still_refused(stub):
    stub.routes[("GET", "/admin/models")] = (418, "teapot")
    with pytest.raises(Refused, match="HTTP 418 from /admin/models: teapot"):
        AdminClient(stub.url).models()


def test_success_that_is_not_json_is_unavailable(stub):
    stub.routes[("GET", "/admin/models")] = (200, "ok")
    with pytest.raises(Unavailable, match="not a JSON object: ok"):
        AdminClient(stub.url).models()


def test_health_503_is_an_answer(stub):
    body = {"status": "unavailable", "models": {}}
    stub.routes[("GET", "/health")] = (503, body)
    assert AdminClient(stub.url).health() == (503, body)
    assert AdminClient(stub.url).health() != (200, HEALTH)


def test_health_500_is_a_failure(stub):
    stub.routes[("GET", "/health")] = error(500, "bug", "internal_error", "server_error")
    with pytest.raises(Unavailable):
        AdminClient(stub.url).health()


def test_connection_refused():
    url = closed_port_url()
    with pytest.raises(Unavailable, match="connection refused") as e:
        AdminClient(url).models()
    assert e.value.status is None


def test_timeout(stub):
    stub.routes[("GET", "/admin/models")] = (200, MODELS, 2.0)
    with pytest.raises(Unavailable, match="no answer within 0.2 s"):
        AdminClient(stub.url, timeout=0.2).models()


def test_wait_overrides_the_timeout(stub):
    stub.routes[("POST", "/admin/models/unload")] = (200, {"model": {}, "aborted": 0}, 0.4)
    assert AdminClient(stub.url, timeout=0.1).unload("x", timeout=1, wait=5)["aborted"] == 0
