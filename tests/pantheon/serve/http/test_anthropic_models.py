"""GET /v1/models in Anthropic's shape for Anthropic's clients (they send anthropic-version), OpenAI's for the rest."""

import pytest

from tests.pantheon.serve.http.server import call

anthropic = pytest.importorskip("anthropic")
VERSION = {"anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def claude(served):
    return anthropic.Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)


def test_the_anthropic_client_lists_and_retrieves_the_served_models(served, claude):
    openai_ids = [m["id"] for m in call(served.port, "GET", "/v1/models")[2]["data"]]
    listed = claude.models.list()
    assert [m.id for m in listed.data] == openai_ids == ["qwen2", "llama"]
    assert all(m.type == "model" and m.display_name == m.id and m.created_at.year >= 2024 for m in listed.data)
    one = claude.models.retrieve("llama")
    assert (one.id, one.type) == ("llama", "model")


def test_pages_follow_after_id_and_before_id(served):
    _, _, first = call(served.port, "GET", "/v1/models?limit=1", headers=VERSION)
    assert ([m["id"] for m in first["data"]], first["has_more"], first["first_id"]) == (["qwen2"], True, "qwen2")
    _, _, rest = call(served.port, "GET", f"/v1/models?limit=1&after_id={first['last_id']}", headers=VERSION)
    assert ([m["id"] for m in rest["data"]], rest["has_more"]) == (["llama"], False)
    _, _, back = call(served.port, "GET", "/v1/models?before_id=llama", headers=VERSION)
    assert ([m["id"] for m in back["data"]], back["has_more"]) == (["qwen2"], False)


def test_without_the_version_header_the_answer_is_openais(served):
    _, _, body = call(served.port, "GET", "/v1/models")
    assert body["object"] == "list" and body["data"][0]["object"] == "model" and "type" not in body["data"][0]
    assert call(served.port, "GET", "/v1/models/qwen2")[2]["object"] == "model"


def test_an_unknown_model_is_anthropics_not_found_error(claude):
    with pytest.raises(anthropic.NotFoundError) as err:
        claude.models.retrieve("nope")
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=%C2%B2", "after_id=nope", "before_id=nope",
                                   "after_id=qwen2&before_id=llama"])
def test_a_bad_page_query_is_anthropics_invalid_request_error(served, query):
    status, _, body = call(served.port, "GET", f"/v1/models?{query}", headers=VERSION)
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
