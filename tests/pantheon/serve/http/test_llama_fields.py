"""llama-server's fields on the OpenAI routes: n_predict, ignore_eos, grammar, json_schema, llama.cpp's optional
samplers, and the ones refused."""

import json
import re

import openai
import pytest

from pantheon.serve.http import llama_fields, validate
from pantheon.serve.http.errors import RequestError
from tests.pantheon.serve.http.server import call

USER = [{"role": "user", "content": "Answer:"}]
GBNF = 'root ::= ("yes" | "no") ", " [0-9] [0-9]? "."'
ANSWER = re.compile(r"(yes|no), [0-9][0-9]?\.")
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
EOS = 2  # the golden qwen2 vocabulary's end-of-text id (one of its stop ids)


def chat(**fields):
    return validate.check(dict({"messages": USER}, **fields), validate.CHAT, ("messages",))


def completion(**fields):
    return validate.check(dict({"prompt": "Hi"}, **fields), validate.COMPLETIONS, ("prompt",))


@pytest.mark.parametrize("check", [chat, completion])
@pytest.mark.parametrize("name,value", [("cache_prompt", False), ("id_slot", 3), ("n_keep", 16), ("typical_p", 1.0),
                                        ("mirostat", 0), ("dry_multiplier", 0.0), ("xtc_probability", 0),
                                        ("dynatemp_range", 0), ("n_indent", 0), ("post_sampling_probs", False),
                                        ("top_n_sigma", -1), ("tfs_z", 1), ("min_keep", 0), ("mirostat_tau", 5.0),
                                        ("mirostat_eta", 0.1), ("dry_base", 1.75), ("dry_allowed_length", 2),
                                        ("dry_penalty_last_n", -1), ("dry_sequence_breakers", ["\n", ":"]),
                                        ("xtc_threshold", 0.1), ("dynatemp_exponent", 1.0)])
def test_fields_that_change_nothing_here_are_accepted_on_both_routes(check, name, value):
    parsed = check(**{name: value, "max_tokens": 3})
    assert parsed.max_tokens == 3 and parsed.grammar is None and not parsed.ignore_eos


@pytest.mark.parametrize("check", [chat, completion])
@pytest.mark.parametrize("name,value", [("samplers", ["temperature", "top_p"]), ("samplers", "ik"),
                                        ("tfs_z", 0.9), ("lora", [])])
def test_samplers_we_do_not_run_are_refused_by_name(check, name, value):
    with pytest.raises(RequestError) as err:
        check(**{name: value})
    assert err.value.param == name and err.value.code == "unsupported_value"


@pytest.mark.parametrize("check", [chat, completion])
@pytest.mark.parametrize("name,value", [("typical_p", 0.9), ("mirostat", 2), ("mirostat_tau", 3.0),
                                        ("mirostat_eta", 0.2), ("xtc_probability", 0.5), ("xtc_threshold", 0.2),
                                        ("dynatemp_range", 0.2), ("dynatemp_exponent", 2.0), ("top_n_sigma", 1.5),
                                        ("dry_multiplier", 0.8), ("dry_base", 1.5), ("dry_allowed_length", 3),
                                        ("dry_penalty_last_n", 64), ("min_keep", 5)])
def test_llama_cpps_optional_samplers_reach_the_sampler(check, name, value):
    assert check(**{name: value}).sampling[name] == value


@pytest.mark.parametrize("check", [chat, completion])
@pytest.mark.parametrize("samplers, kept", [("skypmxt", {"typical_p": 0.9, "xtc_probability": 0.5}),
                                            (["top_k", "typ_p", "top_p"], {"xtc_probability": 0.0}),
                                            (["xtc"], {"top_k": 0, "typical_p": 1.0, "top_n_sigma": -1.0})])
def test_a_samplers_list_keeps_the_optional_samplers_it_names(check, samplers, kept):
    on = {"typical_p": 0.9, "xtc_probability": 0.5, "top_n_sigma": 1.0, "top_k": 5}
    sampling = check(samplers=samplers, **on).sampling
    assert {k: sampling[k] for k in kept} == kept


@pytest.mark.parametrize("check", [chat, completion])
@pytest.mark.parametrize("name,value", [("n_predict", -3), ("n_predict", -2), ("n_predict", "3"), ("ignore_eos", 1),
                                        ("cache_prompt", "yes"), ("grammar", 5), ("grammar", "root ::= ("),
                                        ("json_schema", "{}"), ("json_schema", {"type": "frobnicate"}),
                                        ("id_slot", 1.5), ("samplers", 5), ("samplers", [1]), ("mirostat_tau", "5"),
                                        ("dry_sequence_breakers", "\n"), ("dry_sequence_breakers", ["x"] * 65),
                                        ("mirostat", 3), ("mirostat", 1.5),
                                        ("typical_p", "0.9")])
def test_bad_values_name_the_field(check, name, value):
    with pytest.raises(RequestError) as err:
        check(**{name: value})
    assert err.value.param == name


def test_n_predict_wins_over_the_openai_limits_and_minus_one_means_the_context():
    assert chat(n_predict=5, max_tokens=9, max_completion_tokens=7).max_tokens == 5
    assert completion(n_predict=-1, max_tokens=9).max_tokens == -1
    assert chat(max_tokens=9, max_completion_tokens=7).max_tokens == 7
    assert llama_fields.generation_limit({"max_tokens": 4}, "max_tokens") == 4


def test_a_grammar_is_compiled_once_and_cannot_be_combined_with_another_constraint():
    assert chat(grammar=GBNF).grammar == completion(grammar=GBNF).grammar is not None
    assert chat(json_schema={"type": "object"}).grammar is not None
    assert chat(grammar=GBNF, tools=TOOLS).grammar is not None  # tool_choice auto: the grammar holds
    for fields in ({"grammar": GBNF, "json_schema": {}}, {"grammar": GBNF, "response_format": {"type": "json_object"}},
                   {"json_schema": {}, "tools": TOOLS, "tool_choice": "required"},
                   {"grammar": GBNF, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "f"}}}):
        with pytest.raises(RequestError) as err:
            chat(**fields)
        assert err.value.param in ("grammar", "json_schema") and err.value.code == "invalid_value", fields
    assert chat(grammar=GBNF, response_format={"type": "text"}).grammar is not None


def test_chat_and_completions_follow_a_gbnf_grammar(qwen):
    for seed in range(3):
        status, _, out = call(qwen.port, "POST", "/v1/chat/completions", {
            "messages": USER, "grammar": GBNF, "seed": seed, "temperature": 1.5, "max_tokens": 20})
        assert status == 200 and out["choices"][0]["finish_reason"] == "stop", out
        assert ANSWER.fullmatch(out["choices"][0]["message"]["content"]), out
        status, _, out = call(qwen.port, "POST", "/v1/completions", {
            "prompt": ["Answer:", "Reply:"], "grammar": GBNF, "seed": seed, "temperature": 1.5, "max_tokens": 20})
        assert status == 200 and [ANSWER.fullmatch(c["text"]) is not None for c in out["choices"]] == [True, True]


def test_completions_follow_a_json_schema_and_a_conflict_is_a_400(qwen):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}, "required": ["n"],
              "additionalProperties": False}
    status, _, out = call(qwen.port, "POST", "/v1/completions", {"prompt": "JSON:", "json_schema": schema, "seed": 1,
                                                                 "temperature": 1.0, "max_tokens": 30})
    assert status == 200 and json.loads(out["choices"][0]["text"])["n"] <= 9
    status, _, out = call(qwen.port, "POST", "/v1/chat/completions", {
        "messages": USER, "json_schema": schema, "response_format": {"type": "json_object"}})
    assert status == 400 and out["error"]["param"] == "json_schema"


def test_ignore_eos_bans_the_end_of_text_a_bias_would_force(qwen):
    body = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logit_bias": {str(EOS): 100}}
    status, _, out = call(qwen.port, "POST", "/v1/completions", body)
    assert status == 200 and out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] <= 1
    status, _, out = call(qwen.port, "POST", "/v1/completions", dict(body, ignore_eos=True))
    assert status == 200 and out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 4
    status, _, out = call(qwen.port, "POST", "/v1/chat/completions", {
        "messages": USER, "n_predict": 3, "ignore_eos": True, "temperature": 0, "logit_bias": {str(EOS): 100}})
    assert status == 200 and out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 3


def test_n_predict_minus_one_runs_to_the_context(qwen):
    body = {"prompt": "Once upon a time", "n_predict": -1, "temperature": 0, "ignore_eos": True}
    status, _, out = call(qwen.port, "POST", "/v1/completions", body)
    usage = out["usage"]
    assert status == 200 and usage["prompt_tokens"] + usage["completion_tokens"] == 256  # the fixture's n_ctx


def test_the_openai_client_passes_llama_server_fields_through_extra_body(qwen):
    client = openai.OpenAI(base_url=qwen.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    out = client.chat.completions.create(model="qwen2", messages=USER, temperature=1.2, seed=4, extra_body={
        "grammar": GBNF, "cache_prompt": True, "n_predict": 20, "id_slot": -1})
    assert ANSWER.fullmatch(out.choices[0].message.content)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="qwen2", messages=USER, extra_body={"typical_p": 1.5})
    assert err.value.body["param"] == "typical_p"


def test_n_cmpl_is_n_and_the_two_must_agree():
    assert chat(n_cmpl=3).n == completion(n_cmpl=3).n == 3 and chat(n=2, n_cmpl=2).n == 2 and chat().n == 1
    for check, fields in ((chat, {"n": 2, "n_cmpl": 3}), (completion, {"n_cmpl": 0}), (chat, {"n_cmpl": 129})):
        with pytest.raises(RequestError) as err:
            check(**fields)
        assert err.value.param == "n_cmpl", fields


def test_n_probs_asks_for_logprobs_unless_the_openai_fields_do():
    assert chat(n_probs=3).logprobs == completion(n_probs=3).logprobs == 3
    assert chat(n_probs=0).logprobs is None and chat(logprobs=False, n_probs=2).logprobs == 2
    assert chat(logprobs=True, top_logprobs=1, n_probs=5).logprobs == 1
    assert completion(logprobs=0, n_probs=5).logprobs == 0
    assert completion(n_probs=2, echo=True).logprobs == 2  # with echo the prompt is scored too
    with pytest.raises(RequestError) as err:
        chat(n_probs=21)
    assert err.value.param == "n_probs"


def test_t_max_predict_ms_is_a_limit_in_seconds_and_zero_or_less_is_none():
    assert chat(t_max_predict_ms=250).predict_limit == 0.25 and completion(t_max_predict_ms=1).predict_limit == 0.001
    assert chat(t_max_predict_ms=0).predict_limit is None and chat(t_max_predict_ms=-1).predict_limit is None
    assert chat().predict_limit is None and completion(return_tokens=True).predict_limit is None
    for value in ("100", 1.5, True):
        with pytest.raises(RequestError) as err:
            chat(t_max_predict_ms=value)
        assert err.value.param == "t_max_predict_ms"


def test_n_cmpl_n_probs_and_t_max_predict_ms_act_on_the_openai_routes(qwen):
    body = {"messages": USER, "max_tokens": 3, "temperature": 0, "logit_bias": {str(EOS): -100}}
    status, _, out = call(qwen.port, "POST", "/v1/chat/completions", dict(body, n_cmpl=2, n_probs=2))
    assert status == 200 and [c["index"] for c in out["choices"]] == [0, 1], out
    assert all(len(c["logprobs"]["content"]) == 3 for c in out["choices"])
    assert all(len(t["top_logprobs"]) == 2 for c in out["choices"] for t in c["logprobs"]["content"])
    status, _, out = call(qwen.port, "POST", "/v1/completions", {"prompt": "Once", "max_tokens": 3, "n_probs": 1,
                                                                 "t_max_predict_ms": 60000, "return_tokens": True})
    assert status == 200 and len(out["choices"][0]["logprobs"]["tokens"]) == out["usage"]["completion_tokens"]


def test_n_indent_and_n_predict_zero_are_taken():
    assert chat(n_indent=4).min_indent == 4 and completion(n_indent=2).min_indent == 2 and chat().min_indent == 0
    assert completion(n_predict=0, max_tokens=5).max_tokens == 0
    with pytest.raises(RequestError) as err:
        chat(n_indent=-1)
    assert err.value.param == "n_indent"


@pytest.mark.parametrize("path", ["/v1/completions", "/completion"])
@pytest.mark.parametrize("narrowing", [{"top_n_sigma": 1e-3}, {"mirostat": 2, "mirostat_tau": 0.01},
                                       {"mirostat": 1, "mirostat_tau": 0.0}])
def test_llama_cpps_samplers_reach_the_engine(qwen, path, narrowing):
    """At temperature 50 the golden model's draw is nearly uniform; each of these settings leaves one candidate
    (the best, within a thousandth of a deviation; nothing surprising at all; mirostat v1's k of 1 at mu 0),
    so the reply is the greedy one, and without them it is not."""
    body = {"model": "qwen2", "prompt": "Once upon a time", "max_tokens": 12, "seed": 5, "ignore_eos": True}

    def text(**extra):
        status, _, out = call(qwen.port, "POST", path, dict(body, **extra))
        assert status == 200, out
        return out["content"] if path == "/completion" else out["choices"][0]["text"]
    greedy, hot = text(temperature=0), dict(temperature=50.0, top_k=0, top_p=1.0, min_p=0.0)
    assert text(**hot) != greedy
    assert text(**hot, **narrowing) == greedy


def test_an_optional_sampler_out_of_range_is_a_400_naming_it(qwen):
    for field, value in (("typical_p", 2.0), ("xtc_probability", -0.5), ("dynatemp_range", -1.0)):
        status, _, out = call(qwen.port, "POST", "/v1/completions", {"model": "qwen2", "prompt": "x", field: value})
        assert status == 400 and out["error"]["param"] == field, out


def test_dry_steers_away_from_continuing_a_repetition(qwen):
    """A bias makes token 700 the greedy pick; after "P 700 P" it would continue a 4-token repeat, which DRY
    (multiplier 1000: a penalty of 1000 * 1.75 ** 2) forbids, unless the window is too short to see it or a
    sequence breaker (the text of P's last token) ends the repeat."""
    start = [100, 200, 300, 400]
    body = {"model": "qwen2", "prompt": start + [700] + start, "max_tokens": 1, "temperature": 0,
            "logit_bias": {"700": 200}}

    def first(**extra):
        status, _, out = call(qwen.port, "POST", "/completion", dict(body, n_predict=1, return_tokens=True, **extra))
        assert status == 200, out
        return out["tokens"][0]
    assert first() == 700
    assert first(dry_multiplier=1000.0) != 700
    assert first(dry_multiplier=1000.0, dry_penalty_last_n=4) == 700
    breaker = qwen.backend.served("qwen2").tokenizer.decode([400])
    assert first(dry_multiplier=1000.0, dry_sequence_breakers=[breaker]) == 700
