"""Every refusal over raw HTTP: status, OpenAI error body naming the field, and headers."""

import pytest

import pantheon
from tests.pantheon.serve.http.server import Served, call, open_models

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Hi"}]


def error_of(served, path, body, status, param=None, code=None, raw=None, headers=None):
    got, hdrs, payload = call(served.port, "POST", path, body, raw=raw, headers=headers)
    assert got == status, payload
    err = payload["error"]
    assert {"message", "type", "code", "param"} <= set(err) and err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err, hdrs


def test_unknown_model_is_404(served):
    err, _ = error_of(served, CHAT, {"model": "gpt-9", "messages": USER}, 404, code="model_not_found")
    assert "gpt-9" in err["message"]


def test_missing_model_with_several_served_is_400(served):
    error_of(served, CHAT, {"messages": USER}, 400, param="model")


def test_malformed_json_is_400(served):
    err, _ = error_of(served, CHAT, None, 400, code="invalid_json", raw=b'{"model": "qwen2", "messages": [')
    assert err["type"] == "invalid_request_error"
    error_of(served, "/v1/completions", None, 400, code="invalid_json", raw=b"[1, 2]")


@pytest.mark.parametrize("field,value", [
    ("temperature", "hot"), ("max_tokens", 1.5), ("max_tokens", 0), ("stream", "yes"), ("top_k", True),
    ("stop", ["a"] * 33), ("stop", 3), ("logit_bias", {"x": 1}), ("seed", "1"),
    ("messages", "hello"), ("n", 0), ("logprobs", "yes"), ("response_format", {"type": "xml"}),
    ("tool_choice", "sometimes"), ("top_p", 1.5), ("top_logprobs", 21), ("unknown_knob", 1),
])
def test_bad_or_unknown_field_is_400_naming_it(served, field, value):
    body = {"model": "qwen2", "messages": USER, "max_tokens": 2, field: value}
    err, _ = error_of(served, CHAT, body, 400, param=field)
    assert err["type"] == "invalid_request_error"


def test_nested_message_errors_name_their_path(served):
    error_of(served, CHAT, {"model": "qwen2", "messages": [{"role": "robot", "content": "x"}]}, 400,
             param="messages[0].role")
    parts = [{"type": "image_url", "image_url": {"url": "http://x"}}]
    error_of(served, CHAT, {"model": "qwen2", "messages": [{"role": "user", "content": parts}]}, 400,
             param="messages[0].content[0].type")


def test_completion_prompt_token_ids_are_range_checked(served):
    error_of(served, "/v1/completions", {"model": "qwen2", "prompt": [1, 99999]}, 400, param="prompt")
    error_of(served, "/v1/completions", {"model": "qwen2", "prompt": "x", "echo": "yes"}, 400, param="echo")


def test_logit_bias_outside_the_vocabulary_is_400(served):
    error_of(served, CHAT, {"model": "qwen2", "messages": USER, "logit_bias": {"4096": 5}}, 400, param="logit_bias")


def test_prompt_over_the_context_is_400_and_nothing_is_dropped(served):
    body = {"model": "qwen2", "prompt": [1] * 256, "max_tokens": 1}
    err, _ = error_of(served, "/v1/completions", body, 400, code="context_over_budget")
    assert "256" in err["message"] and (err["n_prompt_tokens"], err["n_ctx"]) == (256, 256)
    err, _ = error_of(served, CHAT, {"model": "qwen2", "messages": [{"role": "user", "content": "Hi " * 300}]},
                      400, code="context_over_budget")
    assert err["n_prompt_tokens"] > 256 and err["n_ctx"] == 256
    status, _, ok = call(served.port, "POST", "/v1/completions", dict(body, prompt=[1] * 255))
    assert status == 200 and ok["usage"]["completion_tokens"] == 1


def test_wrong_method_and_route(served):
    status, hdrs, body = call(served.port, "GET", CHAT)
    assert status == 405 and "POST" in hdrs["Allow"] and body["error"]["code"] == "method_not_allowed"
    status, _, body = call(served.port, "GET", "/v1/nothing")
    assert status == 404 and body["error"]["type"] == "invalid_request_error"


def test_detokenize_rejects_ids_outside_the_vocabulary(served):
    error_of(served, "/detokenize", {"model": "llama", "tokens": [1, 4096]}, 400, param="tokens")
    error_of(served, "/tokenize", {"model": "llama", "text": "x"}, 400, param="text")


@pytest.fixture(scope="module")
def guarded():
    server = Served(open_models(("qwen2",)), api_keys=("sk-one", "sk-two"))
    yield server
    server.close()


def test_api_keys_guard_v1_but_not_health_or_metrics(guarded):
    err, hdrs = error_of(guarded, "/v1/completions", {"prompt": "Hi", "max_tokens": 1}, 401,
                         code="invalid_api_key")
    assert err["type"] == "authentication_error" and hdrs["WWW-Authenticate"] == "Bearer"
    error_of(guarded, "/v1/completions", {"prompt": "Hi"}, 401, headers={"Authorization": "Bearer sk-three"})
    status, _, body = call(guarded.port, "GET", "/v1/models", headers={"Authorization": "Bearer sk-two"})
    assert status == 200 and body["data"][0]["id"] == "qwen2"
    assert call(guarded.port, "GET", "/health")[0] == 200
    assert call(guarded.port, "GET", "/v1/health")[0] == 200  # llama-server's alias
    assert call(guarded.port, "GET", "/v1/models/qwen2")[0] == 401
    assert call(guarded.port, "GET", "/metrics")[0] == 200
    status, _, body = call(guarded.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1},
                           headers={"Authorization": "Bearer sk-one"})
    assert status == 200 and body["usage"]["completion_tokens"] == 1


def test_vllms_ping_and_version_are_public(guarded):
    """/ping answers as /health does, to GET and POST (SageMaker posts); /version names the server's."""
    health = call(guarded.port, "GET", "/health")
    assert call(guarded.port, "GET", "/ping")[::2] == call(guarded.port, "POST", "/ping")[::2] == health[::2]
    status, _, body = call(guarded.port, "GET", "/version")
    assert (status, body) == (200, {"version": pantheon.__version__})


@pytest.fixture(scope="module")
def broken():
    models = open_models(("qwen2",))

    def broken_forward(segments, all_logits=False):
        raise RuntimeError("device lost")

    models["qwen2"].forward = broken_forward
    server = Served(models)
    yield server
    server.close()


def test_a_crashed_engine_ends_the_stream_in_band_and_health_turns_503(broken):
    status, _, text = call(broken.port, "POST", "/v1/chat/completions",
                           {"messages": USER, "stream": True, "max_tokens": 3})
    assert status == 200
    events = [line[len("data: "):] for line in text.split("\n\n") if line]
    assert events[-1] == "[DONE]" and '"code": "generation_failed"'.replace(" ", "") in events[-2]
    status, _, body = call(broken.port, "GET", "/health")
    assert status == 503 and body["status"] == "unavailable" and body["models"]["qwen2"]["state"] == "failed"
    assert call(broken.port, "GET", "/ping")[0] == call(broken.port, "POST", "/ping")[0] == 503  # vLLM's alias
    error_of(broken, CHAT, {"messages": USER}, 503, code="unavailable")
    status, hdrs, _ = call(broken.port, "POST", CHAT, {"messages": USER})
    assert int(hdrs["Retry-After"]) >= 1
