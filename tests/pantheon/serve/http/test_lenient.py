"""What OpenAI clients and browsers send beyond the core fields: ignored fields, bare routes, CORS."""

import json

import openai
import pytest

from pantheon.serve.http import validate
from pantheon.serve.http.errors import RequestError
from tests.conftest import shared_path
from tests.pantheon.serve.http.server import Served, call, open_models

USER = [{"role": "user", "content": "Hi"}]
IGNORED = {"store": False, "metadata": {"k": "v"}, "service_tier": "auto",
           "modalities": ["text"], "prompt_cache_key": "abc", "safety_identifier": "u-1", "verbosity": "low",
           "user": "u", "prediction": {"type": "content", "content": "Hello"}, "parallel_tool_calls": False}


def chat(body):
    return validate.check(dict({"messages": USER}, **body), validate.CHAT, ("messages",))


@pytest.mark.parametrize("name,value", sorted(IGNORED.items()))
def test_fields_that_change_nothing_are_accepted(name, value):
    parsed = chat({name: value})
    assert parsed.messages[0]["content"] == "Hi"


@pytest.mark.parametrize("name,value", [
    ("modalities", ["text", "audio"]), ("audio", {"voice": "alloy"}), ("web_search_options", {}),
    ("store", "yes"), ("metadata", {"k": 1}), ("prediction", {"type": "other"}), ("service_tier", 3),
])
def test_fields_that_would_change_the_output_or_are_malformed_are_400(name, value):
    with pytest.raises(RequestError) as err:
        chat({name: value})
    assert err.value.param.split(".")[0] == name and err.value.status == 400


def test_reasoning_effort_is_a_template_variable_unless_the_kwargs_set_it():
    assert chat({"reasoning_effort": "high"}).template_kwargs == {"reasoning_effort": "high"}
    both = chat({"reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "low", "x": 1}})
    assert both.template_kwargs == {"reasoning_effort": "low", "x": 1} and chat({}).template_kwargs == {}
    with pytest.raises(RequestError) as err:
        chat({"reasoning_effort": "huge"})
    assert err.value.param == "reasoning_effort" and err.value.status == 400


def test_gpt_oss_template_reads_the_requests_reasoning_effort():
    """gpt-oss's real template writes 'Reasoning: <effort>' (medium when none is given) into its system turn."""
    template = shared_path("templates", "openai-gpt-oss-120b.jinja").read_text()
    srv = Served(open_models(("qwen2",)), chat_templates={"qwen2": template})
    try:
        efforts = []
        for extra in ({}, {"reasoning_effort": "high"}, {"reasoning_effort": "high",
                                                          "chat_template_kwargs": {"reasoning_effort": "low"}}):
            status, _, out = call(srv.port, "POST", "/apply-template", dict({"messages": USER}, **extra))
            assert status == 200, out
            efforts += [line for line in out["prompt"].splitlines() if line.startswith("Reasoning: ")]
        assert efforts == ["Reasoning: medium", "Reasoning: high", "Reasoning: low"]
    finally:
        srv.close()


def test_legacy_functions_become_tools():
    fn = {"name": "get_time", "parameters": {"type": "object", "properties": {}}}
    parsed = chat({"functions": [fn], "function_call": "auto"})
    assert parsed.tools == [{"type": "function", "function": fn}] and parsed.tool_choice == "auto"
    assert chat({"functions": [fn], "function_call": "none"}).tool_choice == "none"
    with pytest.raises(RequestError):
        chat({"functions": [{"description": "no name"}]})


def test_completions_accept_the_common_ignored_fields():
    p = validate.check({"prompt": "x", "store": True, "metadata": {}, "user": "u"}, validate.COMPLETIONS, ())
    assert p.prompt == ["x"]


def test_routes_without_v1_answer_like_the_v1_ones(served):
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    assert {m.id for m in client.models.list()} == {"qwen2", "llama"}
    out = client.chat.completions.create(model="qwen2", messages=USER, max_tokens=2, store=False,
                                         metadata={"a": "b"}, parallel_tool_calls=True, prediction=None)
    assert out.choices[0].message.role == "assistant" and out.usage.completion_tokens <= 2
    text = client.completions.create(model="llama", prompt="Hi", max_tokens=2)
    assert text.object == "text_completion"


@pytest.fixture(scope="module")
def browser():
    server = Served(open_models(("qwen2",)), api_keys=("sk-one",), cors_origins=("https://app.example",))
    yield server
    server.close()


def test_preflight_needs_no_key_and_names_the_origin(browser):
    asks = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}
    status, hdrs, _ = call(browser.port, "OPTIONS", "/v1/chat/completions", headers=asks)
    assert status == 204 and hdrs["Access-Control-Allow-Origin"] == "https://app.example"
    assert "POST" in hdrs["Access-Control-Allow-Methods"]
    assert hdrs["Access-Control-Allow-Headers"] == "authorization, content-type"
    status, hdrs, _ = call(browser.port, "OPTIONS", "/v1/chat/completions",
                           headers=dict(asks, Origin="https://evil.example"))
    assert status == 204 and "Access-Control-Allow-Origin" not in hdrs


def test_allowed_origin_sees_answers_and_errors_and_the_key_still_counts(browser):
    origin = {"Origin": "https://app.example"}
    status, hdrs, _ = call(browser.port, "POST", "/chat/completions", {"messages": USER, "max_tokens": 1},
                           headers=origin)
    assert status == 401 and hdrs["Access-Control-Allow-Origin"] == "https://app.example"
    status, hdrs, body = call(browser.port, "POST", "/chat/completions", {"messages": USER, "max_tokens": 1},
                              headers=dict(origin, Authorization="Bearer sk-one"))
    assert status == 200 and hdrs["Access-Control-Allow-Origin"] == "https://app.example"
    assert "X-Request-Id" in hdrs["Access-Control-Expose-Headers"]  # a page's script may read the id
    status, hdrs, _ = call(browser.port, "GET", "/health", headers={"Origin": "https://evil.example"})
    assert status == 200 and "Access-Control-Allow-Origin" not in hdrs


def test_echo_leads_the_answer_with_the_prompt_streamed_or_not(served):
    body = {"model": "llama", "prompt": "Once upon", "max_tokens": 3, "temperature": 0, "logit_bias": {"2": -100}}
    plain = call(served.port, "POST", "/v1/completions", body)[2]["choices"][0]["text"]
    echoed = call(served.port, "POST", "/v1/completions", dict(body, echo=True))[2]["choices"][0]["text"]
    assert echoed == "Once upon" + plain
    status, _, text = call(served.port, "POST", "/v1/completions", dict(body, echo=True, stream=True))
    pieces = [json.loads(b[6:])["choices"][0]["text"] for b in text.split("\n\n") if b and b != "data: [DONE]"]
    assert status == 200 and pieces[0] == "Once upon" and "".join(pieces) == echoed
