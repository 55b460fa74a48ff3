"""llama-server's own routes over HTTP: /completion, /infill, /props, /slots, /apply-template."""

import json
import math
import re

import pytest
from gguf import GGUFValueType

import pantheon
from pantheon.serve.http.native import picked
from tests.conftest import shared_path
from tests.ggufcraft import rewrite
from tests.pantheon.serve.http.server import Served, call, greedy_ids

NO_EOS = [[2, False]]


def test_completion_answers_in_llama_server_shape_and_matches_v1(qwen):
    body = {"prompt": "Once upon a time", "n_predict": 6, "temperature": 0, "logit_bias": NO_EOS,
            "cache_prompt": True, "return_tokens": True}
    status, _, out = call(qwen.port, "POST", "/completion", body)
    assert status == 200 and out["stop"] is True and out["stop_type"] == "limit" and out["tokens_predicted"] == 6
    assert len(out["tokens"]) == 6 and out["tokens_evaluated"] > 3 and out["model"] == "qwen2"
    t = out["timings"]
    assert t["predicted_n"] == 6 and t["predicted_ms"] > 0 and t["prompt_ms"] > 0 and t["predicted_per_second"] > 0
    status, _, v1 = call(qwen.port, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 6,
                                                                  "temperature": 0, "logit_bias": {"2": -100}})
    assert out["content"] == v1["choices"][0]["text"]


def test_completion_stream_has_no_done_and_ends_with_the_summary(qwen):
    body = {"prompt": "Once upon a time", "n_predict": 5, "temperature": 0, "logit_bias": NO_EOS, "stream": True}
    status, hdrs, text = call(qwen.port, "POST", "/completion", body)
    events = [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b]
    assert status == 200 and hdrs["Content-Type"].startswith("text/event-stream")
    assert [e["stop"] for e in events[:-1]] == [False] * (len(events) - 1) and events[-1]["stop"] is True
    assert "timings" in events[-1] and events[-1]["tokens_predicted"] == 5
    whole = call(qwen.port, "POST", "/completion", dict(body, stream=False))[2]["content"]
    assert "".join(e["content"] for e in events) == whole


def test_completion_stop_word_and_ignore_eos(qwen):
    status, _, out = call(qwen.port, "POST", "/completion", {"prompt": [1, 15, 16], "n_predict": 4, "ignore_eos": True,
                                                             "temperature": 0})
    assert status == 200 and out["tokens_predicted"] == 4 and out["stop_type"] == "limit"
    first = out["content"]
    if first.strip():
        word = first.strip()[0]
        status, _, cut = call(qwen.port, "POST", "/completion", {"prompt": [1, 15, 16], "n_predict": 4,
                                                                 "ignore_eos": True, "temperature": 0, "stop": [word]})
        assert cut["stop_type"] == "word" and cut["stopping_word"] == word and word not in cut["content"]


def test_n_probs_gives_completion_probabilities_equal_to_v1_logprobs(qwen):
    body = {"prompt": "Once upon a time", "n_predict": 5, "temperature": 0, "logit_bias": NO_EOS, "n_probs": 3}
    out = call(qwen.port, "POST", "/completion", body)[2]
    probs = out["completion_probabilities"]
    v1 = call(qwen.port, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0,
                                                      "logit_bias": {"2": -100}, "logprobs": 3})[2]
    lp = v1["choices"][0]["logprobs"]
    assert [p["token"] for p in probs] == lp["tokens"]
    assert [p["logprob"] for p in probs] == pytest.approx(lp["token_logprobs"], abs=1e-4)
    for p in probs:
        assert set(p) == {"id", "token", "bytes", "logprob", "top_logprobs"} and len(p["top_logprobs"]) == 3
        assert p["top_logprobs"][0]["id"] == p["id"]  # greedy: the chosen token is the likeliest
        assert bytes(p["bytes"]).decode("utf-8", "replace") == p["token"] or p["token"].startswith("bytes:")
    status, _, text = call(qwen.port, "POST", "/completion", dict(body, stream=True))
    events = [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b]
    streamed = [p for e in events for p in e["completion_probabilities"]]
    assert [p["id"] for p in streamed] == [p["id"] for p in probs]
    assert [p["logprob"] for p in streamed] == pytest.approx([p["logprob"] for p in probs], abs=1e-6)
    assert "completion_probabilities" not in call(qwen.port, "POST", "/completion", dict(body, n_probs=0))[2]


def test_post_sampling_probs_are_the_survivors_renormalized_as_llama_server_reports_them(qwen):
    """top_k 3 at temperature 1: each token's three survivors, their probabilities the softmax of their raw
    logprobs (the same seed draws the same tokens with and without it); llama-server's prob / top_probs."""
    body = {"prompt": "Once upon a time", "n_predict": 5, "temperature": 1.0, "top_k": 3, "top_p": 1.0,
            "min_p": 0.0, "repeat_penalty": 1.0, "seed": 7, "n_probs": 3}
    raw = call(qwen.port, "POST", "/completion", body)[2]["completion_probabilities"]
    status, _, out = call(qwen.port, "POST", "/completion", dict(body, post_sampling_probs=True))
    assert status == 200, out
    post = out["completion_probabilities"]
    assert [p["id"] for p in post] == [p["id"] for p in raw]
    for p, r in zip(post, raw):
        assert set(p) == {"id", "token", "bytes", "prob", "top_probs"} and set(p["top_probs"][0]) == {
            "id", "token", "bytes", "prob"}
        lps = [t["logprob"] for t in r["top_logprobs"]]
        want = [math.exp(lp - max(lps)) / sum(math.exp(x - max(lps)) for x in lps) for lp in lps]
        assert [t["id"] for t in p["top_probs"]] == [t["id"] for t in r["top_logprobs"]]
        assert [t["prob"] for t in p["top_probs"]] == pytest.approx(want, abs=1e-5)
        assert p["prob"] == pytest.approx(want[[t["id"] for t in r["top_logprobs"]].index(p["id"])], abs=1e-5)


def test_post_sampling_probs_on_the_chat_route_and_where_they_are_refused(qwen):
    ask = {"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0,
           "logprobs": True, "top_logprobs": 2, "post_sampling_probs": True}
    status, _, out = call(qwen.port, "POST", "/v1/chat/completions", ask)
    assert status == 200, out
    entries = out["choices"][0]["logprobs"]["content"]
    assert entries and all(e["prob"] == 1.0 and e["top_probs"][0]["prob"] == 1.0 for e in entries)  # greedy
    refused = [("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "logprobs": 2, "post_sampling_probs": True}),
               ("/completion", {"prompt": "Hi", "n_predict": 2, "n_probs": 2, "post_sampling_probs": True,
                                "mirostat": 2})]
    for path, body in refused:
        status, _, out = call(qwen.port, "POST", path, body)
        assert status == 400 and out["error"]["param"] == "post_sampling_probs", out
    assert call(qwen.port, "POST", "/v1/completions", dict(refused[0][1], logprobs=None))[0] == 200  # no probs asked


def test_completion_takes_a_list_of_prompts_and_answers_a_list(qwen):
    body = {"n_predict": 3, "temperature": 0, "logit_bias": NO_EOS}
    alone = [call(qwen.port, "POST", "/completion", dict(body, prompt=p))[2] for p in ("Once upon", [1, 500])]
    status, _, out = call(qwen.port, "POST", "/completion", dict(body, prompt=["Once upon", [1, 500]]))
    assert status == 200 and [o["index"] for o in out] == [0, 1]
    assert [o["content"] for o in out] == [a["content"] for a in alone]
    status, _, text = call(qwen.port, "POST", "/completion", dict(body, prompt=["Once upon", [1, 500]], stream=True))
    events = [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b]
    for i, a in enumerate(alone):
        mine = [e for e in events if e["index"] == i]
        assert "".join(e["content"] for e in mine) == a["content"] and mine[-1]["stop"] is True
    status, _, err = call(qwen.port, "POST", "/completion", dict(body, prompt=["fine", [1, 99999]]))
    assert status == 400 and err["error"]["param"] == "prompt"


@pytest.mark.parametrize("field,value", [("n_probs", 21), ("n_probs", -1), ("grammar", "root ::= ("), ("json_schema", {"type": "frobnicate"}), ("mirostat", 5),
                                         ("n_predict", -2), ("prompt", {"x": 1}), ("prompt", ["a", 1]), ("prompt", ["a"] * 17), ("samplers", ["temperature", "top_k"]),
                                         ("bogus", 1), ("logit_bias", [[1]])])
def test_completion_refuses_what_it_does_not_do(qwen, field, value):
    body = {"prompt": "Hi", "n_predict": 1}
    status, _, out = call(qwen.port, "POST", "/completion", dict(body, **{field: value}))
    assert status == 400 and out["error"]["param"].startswith(field)


def test_completion_follows_a_gbnf_grammar_and_a_json_schema(qwen):
    gbnf = 'root ::= ("yes" | "no") ", " [0-9] [0-9]? "."'
    for seed in range(3):
        status, _, out = call(qwen.port, "POST", "/completion", {"prompt": "Answer:", "grammar": gbnf, "seed": seed,
                                                                 "temperature": 1.5, "n_predict": 20})
        assert status == 200 and out["stop_type"] == "eos", out
        assert re.fullmatch(r"(yes|no), [0-9][0-9]?\.", out["content"]), out["content"]
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}, "required": ["n"],
              "additionalProperties": False}
    status, _, out = call(qwen.port, "POST", "/completion", {"prompt": "JSON:", "json_schema": schema, "seed": 1,
                                                             "temperature": 1.0, "n_predict": 30})
    assert status == 200 and json.loads(out["content"])["n"] <= 9


def test_props_slots_and_apply_template(qwen):
    status, _, props = call(qwen.port, "GET", "/props")
    assert status == 200 and props["default_generation_settings"]["n_ctx"] == 256
    assert "<|im_start|>" in props["chat_template"] and props["tool_call_format"] == "hermes"
    status, _, slots = call(qwen.port, "GET", "/slots")
    assert status == 200 and slots[0]["model"] == "qwen2" and slots[0]["n_ctx"] == 256
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    status, _, out = call(qwen.port, "POST", "/apply-template", {"messages": msgs})
    assert status == 200 and out["prompt"] == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    chat_body = {"messages": msgs, "max_tokens": 9, "temperature": 0.2, "stream": True, "n_predict": 3}
    assert call(qwen.port, "POST", "/apply-template", chat_body)[2] == out
    status, _, err = call(qwen.port, "POST", "/apply-template", dict(chat_body, temperature="hot"))
    assert status == 400 and err["error"]["param"] == "temperature"


def test_infill_needs_fim_tokens(qwen):
    status, _, out = call(qwen.port, "POST", "/infill", {"input_prefix": "def f(", "input_suffix": "):\n"})
    assert status == 400 and out["error"]["code"] == "not_supported"


def test_infill_on_a_model_whose_gguf_names_its_fim_tokens(tmp_path):
    """/infill end to end on the golden qwen2 model with FIM ids given by llama.cpp's GGUF keys (its vocabulary
    has no FIM texts): the answer is the engine's greedy continuation of [BOS] PRE prefix SUF suffix MID, the
    prompt built here by hand; /api/show lists the insert capability."""
    pre, suf, mid = 4093, 4094, 4095
    path = tmp_path / "coder.gguf"
    rewrite(shared_path("golden", "qwen2-q8_0.gguf"), path, set_keys={
        f"tokenizer.ggml.fim_{role}_token_id": (tid, GGUFValueType.UINT32)
        for role, tid in (("pre", pre), ("suf", suf), ("mid", mid))})
    srv = Served({"coder": pantheon.open_model(str(path), threads=1)})
    try:
        prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
        body = {"input_prefix": prefix, "input_suffix": suffix, "n_predict": 6, "temperature": 0, "return_tokens": True}
        status, _, out = call(srv.port, "POST", "/infill", body)
        assert status == 200, out
        ref = pantheon.open_model(str(path), threads=1)
        tok = ref.tokenizer
        ids = (tok.encode("", add_special=True) + [pre] + tok.encode(prefix, add_special=False) + [suf]
               + tok.encode(suffix, add_special=False) + [mid])
        assert out["tokens_evaluated"] == len(ids) and out["tokens"] == greedy_ids(ref, ids, 6, 256)
        assert "insert" in call(srv.port, "POST", "/api/show", {"model": "coder"})[2]["capabilities"]
    finally:
        srv.close()


def test_n_cmpl_gives_completions_per_prompt_in_prompt_order(qwen):
    body = {"n_predict": 3, "temperature": 0, "logit_bias": NO_EOS}
    alone = [call(qwen.port, "POST", "/completion", dict(body, prompt=p))[2]["content"]
             for p in ("Once upon", [1, 500])]
    status, _, out = call(qwen.port, "POST", "/completion", dict(body, prompt="Once upon", n_cmpl=2))
    assert status == 200 and [o["index"] for o in out] == [0, 1] and [o["content"] for o in out] == [alone[0]] * 2
    status, _, out = call(qwen.port, "POST", "/completion", dict(body, prompt=["Once upon", [1, 500]], n=2))
    assert [o["index"] for o in out] == [0, 1, 2, 3] and [o["content"] for o in out] == [alone[0]] * 2 + [alone[1]] * 2
    status, _, text = call(qwen.port, "POST", "/completion", dict(body, prompt="Once upon", n_cmpl=2, stream=True))
    events = [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b]
    assert ["".join(e["content"] for e in events if e["index"] == i) for i in (0, 1)] == [alone[0]] * 2
    for fields in ({"n_cmpl": 2, "n": 3}, {"n_cmpl": 5}):  # the fixture's model decodes at most 4 at once
        status, _, err = call(qwen.port, "POST", "/completion", dict(body, prompt="Once", **fields))
        assert status == 400 and err["error"]["param"] in ("n_cmpl", "n"), err


def test_streamed_return_tokens_add_up_to_the_whole_answer(qwen):
    body = {"prompt": "Once upon a time", "n_predict": 6, "temperature": 0, "logit_bias": NO_EOS, "return_tokens": True}
    whole = call(qwen.port, "POST", "/completion", body)[2]["tokens"]
    status, _, text = call(qwen.port, "POST", "/completion", dict(body, stream=True))
    events = [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b]
    assert len(whole) == 6 and [t for e in events for t in e["tokens"]] == whole
    assert any(e["tokens"] for e in events[:-1])  # sent as they come, not all at the end
    events = [json.loads(b[len("data: "):]) for b in call(qwen.port, "POST", "/completion", dict(
        body, stream=True, return_tokens=False))[2].split("\n\n") if b]
    assert all(e["tokens"] == [] for e in events)


def test_generation_settings_show_what_samplers_left_running(qwen):
    body = {"prompt": "Once", "n_predict": 1, "top_k": 5, "top_p": 0.5, "temperature": 0.7}
    settings = call(qwen.port, "POST", "/completion", body)[2]["generation_settings"]
    assert (settings["top_k"], settings["top_p"], settings["temperature"]) == (5, 0.5, 0.7)
    settings = call(qwen.port, "POST", "/completion", dict(body, samplers=["top_k", "temperature"]))[2][
        "generation_settings"]
    assert (settings["top_k"], settings["top_p"], settings["temperature"]) == (5, 1.0, 0.7)
    assert settings["samplers"] == ["top_k", "temperature"]


def test_generation_settings_echo_the_output_settings_as_llama_server_does(qwen):
    body = {"prompt": "Once", "n_predict": 2, "n_probs": 3, "post_sampling_probs": True, "ignore_eos": True}
    settings = call(qwen.port, "POST", "/completion", body)[2]["generation_settings"]
    assert {k: settings[k] for k in ("n_predict", "n_probs", "post_sampling_probs", "ignore_eos", "stream")} == {
        "n_predict": 2, "n_probs": 3, "post_sampling_probs": True, "ignore_eos": True, "stream": False}
    assert settings["samplers"] == ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                                    "temperature"]  # llama.cpp's default chain, in its names
    params = call(qwen.port, "GET", "/props")[2]["default_generation_settings"]["params"]
    assert (params["n_predict"], params["n_probs"], params["post_sampling_probs"]) == (-1, 0, False)


def test_t_max_predict_ms_ends_at_a_newline_once_the_time_is_up(qwen):
    tok = qwen.backend.served("qwen2").tokenizer
    newline = next(i for i in range(tok.n_vocab) if tok.token_bytes(i) == b"\n")
    # the front sees tokens as they arrive, and a busy front may take a burst of them as one event (one
    # arrival time): a generation long enough that it cannot all come in one burst
    body = {"prompt": "Once", "n_predict": 200, "temperature": 0, "logit_bias": [[newline, 1e9]]}
    out = call(qwen.port, "POST", "/completion", body)[2]
    assert out["content"] == "\n" * 200 and out["stop_type"] == "limit"
    out = call(qwen.port, "POST", "/completion", dict(body, t_max_predict_ms=1))[2]
    assert out["stop_type"] == "limit" and 2 <= out["tokens_predicted"] < 200 and out["content"] == "\n" * out[
        "tokens_predicted"]
    assert out["timings"]["predicted_ms"] >= 1


def _forced_newlines(qwen, **fields):
    tok = qwen.backend.served("qwen2").tokenizer
    newline = next(i for i in range(tok.n_vocab) if tok.token_bytes(i) == b"\n")
    body = {"prompt": "Once", "n_predict": 40, "temperature": 0, "logit_bias": [[newline, 1e9]]}
    return call(qwen.port, "POST", "/completion", dict(body, **fields))[2]


def test_n_indent_ends_before_a_line_indented_less(qwen):
    """Every token is a newline: the second starts a blank line, which n_indent 1 does not allow."""
    assert _forced_newlines(qwen)["content"] == "\n" * 40
    out = _forced_newlines(qwen, n_indent=1)
    assert (out["content"], out["stop_type"], out["tokens_predicted"]) == ("\n", "limit", 2)
    assert _forced_newlines(qwen, n_indent=0)["content"] == "\n" * 40
    status, _, err = call(qwen.port, "POST", "/completion", {"prompt": "Hi", "n_indent": -1})
    assert status == 400 and err["error"]["param"] == "n_indent"


def test_n_predict_zero_computes_the_prompt_into_the_cache_and_answers_nothing(qwen):
    """llama.vim's warm-up request (its fields verbatim, on /completion: this model has no FIM tokens)."""
    prompt = "A long shared context that the next request starts with, " * 3
    warm = {"prompt": prompt, "n_predict": 0, "temperature": 0.0, "stream": False, "samplers": [],
            "cache_prompt": True, "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""], "id_slot": 0}
    status, _, out = call(qwen.port, "POST", "/completion", warm)
    assert (status, out) == (200, {})
    out = call(qwen.port, "POST", "/completion", dict(warm, prompt=prompt + "and more", response_fields=None))[2]
    assert out["tokens_predicted"] == 0 and out["content"] == "" and out["stop_type"] == "limit"
    assert out["tokens_cached"] >= out["tokens_evaluated"] - 4  # all but the new words came from the cache
    out = call(qwen.port, "POST", "/v1/completions", {"prompt": prompt, "n_predict": 0})[2]
    assert out["choices"][0]["text"] == "" and out["usage"]["completion_tokens"] == 0


def test_response_fields_keep_only_the_named_fields_flattened(qwen):
    body = {"prompt": "Once", "n_predict": 2, "response_fields": ["content", "timings/prompt_n", "tokens_cached",
                                                                   "timings/nothing", "nothing/at/all"]}
    out = call(qwen.port, "POST", "/completion", body)[2]
    assert set(out) == {"content", "timings/prompt_n", "tokens_cached"} and out["timings/prompt_n"] > 0
    status, _, text = call(qwen.port, "POST", "/completion", dict(body, stream=True))
    events = [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b]
    assert set(events[-1]) == {"content", "timings/prompt_n", "tokens_cached"} and "stop" in events[0]
    assert picked({"a": {"b": 1}, "c": 2}, ["a/b", "a", "a/b/c", "c/d"]) == {"a/b": 1, "a": {"b": 1}}
    status, _, err = call(qwen.port, "POST", "/completion", dict(body, response_fields="content"))
    assert status == 400 and err["error"]["param"] == "response_fields"


def test_the_infill_sampler_runs_as_llama_vim_asks_and_needs_top_k(qwen):
    """llama.vim's FIM request fields (on /completion: this model has no FIM tokens for /infill)."""
    body = {"prompt": "def f(x):\n", "n_predict": 8, "stop": [], "n_indent": 0, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True, "seed": 4,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "id_slot": 0,
            "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"]}
    status, _, out = call(qwen.port, "POST", "/completion", body)
    assert status == 200 and set(out) == {"content", "timings/prompt_n", "timings/predicted_n", "truncated",
                                          "tokens_cached"}, out
    assert call(qwen.port, "POST", "/completion", body)[2]["content"] == out["content"]  # the seed holds
    for fields in ({"top_k": 0}, {"samplers": ["top_p", "infill"]}, {"top_k": 257}):
        status, _, err = call(qwen.port, "POST", "/completion", dict(body, **fields))
        assert status == 400 and err["error"]["param"] == "top_k", err


@pytest.mark.parametrize("text", ["<s>[INST] Hi [/INST]", "Hello</s><s>again", "plain text"])
def test_a_text_prompt_reads_control_token_text_as_those_tokens_on_every_route(served, text):
    """llama-server tokenizes a completion prompt with parse_special (as vLLM's and Ollama's raw prompts):
    "<s>" is the BOS token, so each route's prompt counts what /tokenize (add_special) counts."""
    tok = served.backend.served("llama").tokenizer
    ids = call(served.port, "POST", "/tokenize", {"model": "llama", "content": text, "add_special": True})[2]["tokens"]
    assert ids == tok.encode(text, add_special=True, parse_special=True)
    assert "<s>" not in text or len(ids) < len(tok.encode(text, add_special=True, parse_special=False))
    ask = {"model": "llama", "max_tokens": 1, "temperature": 0}
    v1 = call(served.port, "POST", "/v1/completions", dict(ask, prompt=text))[2]
    native = call(served.port, "POST", "/completion", dict(ask, prompt=text))[2]
    ollama = call(served.port, "POST", "/api/generate", {"model": "llama", "prompt": text, "raw": True,
                                                         "stream": False, "options": {"num_predict": 1}})[2]
    assert v1["usage"]["prompt_tokens"] == native["tokens_evaluated"] == ollama["prompt_eval_count"] == len(ids)
