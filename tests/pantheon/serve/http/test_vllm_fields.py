"""vLLM's extra request fields: restated as Pantheon's, run, and refused by name where they would change nothing
here but the client's expectations."""

import json
import math
import re

import pytest

from pantheon.serve.http import validate, vllm_fields
from pantheon.serve.http.completions import bad_word_ids
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.logprobs import TokenText
from tests.conftest import shared_path
from tests.pantheon.serve.http.server import Served, call, greedy_ids, open_models

PROMPT = [1, 300, 301, 302, 303]  # token ids: the same prompt for both golden models


def completion(**fields):
    return validate.check(dict({"prompt": "Hi"}, **fields), validate.COMPLETIONS, ("prompt",))


def refused(**fields):
    with pytest.raises(RequestError) as err:
        completion(**fields)
    return err.value


def test_repetition_penalty_is_repeat_penalty_over_the_whole_context():
    assert {k: completion(repetition_penalty=1.3).sampling[k] for k in ("repeat_penalty", "repeat_last_n")} == {
        "repeat_penalty": 1.3, "repeat_last_n": -1}
    assert completion(repetition_penalty=1.3, repeat_last_n=16).sampling["repeat_last_n"] == 16
    assert refused(repetition_penalty=1.3, repeat_penalty=1.1).param == "repetition_penalty"
    assert refused(repetition_penalty=0.0).param == "repetition_penalty"


@pytest.mark.parametrize("fields, kind", [
    ({"guided_json": {"type": "object"}}, "json_schema"), ({"guided_json": '{"type": "object"}'}, "json_schema"),
    ({"guided_regex": "[0-9]+/[a-z]"}, "lark"), ({"guided_choice": ["yes", "no"]}, "lark"),
    ({"guided_grammar": 'root ::= "a" | "b"'}, "gbnf"), ({"guided_grammar": 'start: "a" | "b"'}, "lark"),
    ({"structured_outputs": {"choice": ["x"]}}, "lark"), ({"structured_outputs": {"json_object": True}}, "json_schema"),
])
def test_each_guided_form_compiles_to_one_grammar(fields, kind):
    assert vllm_fields.restated(fields)["guided"][1] == kind
    assert completion(**fields).grammar is not None


@pytest.mark.parametrize("fields, param", [
    ({"guided_json": {"type": "object"}, "guided_choice": ["a"]}, "guided_choice"),
    ({"guided_choice": ["a"], "grammar": 'root ::= "a"'}, "guided_choice"),
    ({"guided_choice": []}, "guided_choice"), ({"guided_regex": "("}, "guided_regex"),
    ({"structured_outputs": {"choice": ["a"], "regex": "b"}}, "structured_outputs"),
    ({"structured_outputs": {"choices": ["a"]}}, "structured_outputs.choices"),
    ({"stop_token_ids": [1, -2]}, "stop_token_ids[1]"), ({"stop_token_ids": "1"}, "stop_token_ids"),
    ({"top_k": -2}, "top_k"), ({"min_tokens": 5, "max_tokens": 4}, "min_tokens"), ({"min_tokens": -1}, "min_tokens"),
])
def test_a_bad_or_conflicting_vllm_field_is_a_400_naming_it(fields, param):
    assert refused(**fields).param == param


@pytest.mark.parametrize("name, neutral, other", [
    ("spaces_between_special_tokens", True, False), ("use_beam_search", False, True), ("length_penalty", 1.0, 0.5),
    ("priority", 0, 3)])
def test_fields_run_only_at_their_neutral_value_are_refused_otherwise(name, neutral, other):
    completion(**{name: neutral})
    err = refused(**{name: other})
    assert (err.param, err.code) == (name, "unsupported_value")


def test_chat_takes_the_template_switches_at_their_defaults():
    """(continue_final_message with add_generation_prompt true, and the rest: test_chat_plan)"""
    body = {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True,
            "continue_final_message": False, "top_k": -1}
    checked = validate.check(body, validate.CHAT, ("messages",))
    assert checked.sampling["top_k"] == 0 and not checked.continue_final


def answer(served, **fields):
    status, _, out = call(served.port, "POST", "/v1/completions", dict(
        {"model": "llama", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}, **fields))
    assert status == 200, out
    return out["choices"][0]


@pytest.mark.parametrize("fields, valid", [
    ({"guided_choice": ["alpha", "beta gamma"]}, lambda t: t in ("alpha", "beta gamma")),
    ({"guided_regex": "[0-9]{3}-[a-c]"}, lambda t: re.fullmatch("[0-9]{3}-[a-c]", t)),
    ({"guided_json": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                      "additionalProperties": False}, "max_tokens": 20},
     lambda t: isinstance(json.loads(t)["ok"], bool)),
    ({"structured_outputs": {"choice": ["left", "right"]}}, lambda t: t in ("left", "right")),
])
def test_a_guided_answer_follows_its_grammar(served, fields, valid):
    got = answer(served, **fields)
    assert valid(got["text"]), got


def test_repetition_penalty_answers_as_repeat_penalty_over_the_whole_context(served):
    """A bias makes token 500 the pick at every step; a penalty that large takes it once it is in the context."""
    forced = {"logit_bias": {"500": 1000}, "max_tokens": 6}
    base = answer(served, **forced)["text"]
    penalised = answer(served, **forced, repetition_penalty=1e30)["text"]
    assert penalised == answer(served, **forced, repeat_penalty=1e30, repeat_last_n=-1)["text"] != base


def test_stop_token_ids_end_the_answer_before_that_token(served, reference):
    tokens = greedy_ids(reference["llama"], PROMPT, 8, 256)
    stop = next(t for t in tokens[2:] if t not in tokens[:2])
    cut = tokens[:tokens.index(stop)]
    got = answer(served, stop_token_ids=[stop], max_tokens=8)
    tok = served.backend.served("llama").tokenizer
    assert (got["text"], got["finish_reason"]) == (tok.decode(cut), "stop")
    status, _, out = call(served.port, "POST", "/v1/completions", {"model": "llama", "prompt": PROMPT,
                                                                   "stop_token_ids": [10**6]})
    assert status == 400 and out["error"]["param"] == "stop_token_ids"


def test_stop_reason_names_the_stop_token_or_string_and_include_stop_str_in_output_shows_a_stop_tokens_text(
        served, reference):
    """vLLM's stop_reason: the stop_token_ids id (its text ends the answer with include_stop_str_in_output),
    the stop string, or null for the model's EOS and a length cut; the last stream chunk carries it."""
    tokens = greedy_ids(reference["llama"], PROMPT, 8, 256)
    tok = served.backend.served("llama").tokenizer
    stop = next(t for t in tokens[2:] if t not in tokens[:2])
    cut = tokens[:tokens.index(stop)]
    assert answer(served, stop_token_ids=[stop])["stop_reason"] == stop
    shown = answer(served, stop_token_ids=[stop], include_stop_str_in_output=True)
    assert (shown["text"], shown["stop_reason"]) == (tok.decode(cut + [stop]), stop)
    assert tok.decode(cut + [stop]) != tok.decode(cut)
    text = tok.decode(tokens)
    assert answer(served, stop=[text[3:5]])["stop_reason"] == text[3:5]
    eos = answer(served, logit_bias={"2": 1000}, stop_token_ids=[2], include_stop_str_in_output=True)
    assert (eos["text"], eos["finish_reason"], eos["stop_reason"]) == ("", "stop", None)
    assert answer(served)["stop_reason"] is None
    status, _, streamed = call(served.port, "POST", "/v1/chat/completions", {
        "model": "llama", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0,
        "logit_bias": {str(stop): 1000}, "stop_token_ids": [stop], "stream": True})
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    assert status == 200 and chunks[-1]["choices"][0]["stop_reason"] == stop, chunks[-1]


def test_skip_special_tokens_false_writes_control_tokens_text(served):
    """BOS made the certain pick: its text is left out, as always, unless skip_special_tokens is false (then
    it is in the answer, whole, streamed and in chat content, as the vocabulary spells it)."""
    forced = {"logit_bias": {"1": 1000}, "max_tokens": 3}
    spelled = served.backend.served("llama").tokenizer.decode([1, 1, 1], special=True)
    assert spelled == "<s>" * 3
    assert answer(served, **forced)["text"] == ""
    assert answer(served, **forced, skip_special_tokens=False)["text"] == spelled
    status, _, streamed = call(served.port, "POST", "/v1/completions", dict(
        {"model": "llama", "prompt": PROMPT, "temperature": 0, "stream": True, "skip_special_tokens": False},
        **forced))
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    assert status == 200 and "".join(c["choices"][0]["text"] for c in chunks) == spelled
    status, _, chat = call(served.port, "POST", "/v1/chat/completions", dict(
        {"model": "llama", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0,
         "skip_special_tokens": False}, **forced))
    assert status == 200 and chat["choices"][0]["message"]["content"] == spelled, chat


def test_min_tokens_holds_off_the_end_token_and_the_stop_strings(served, reference):
    """The end token made the certain pick ends the answer at once, or after min_tokens tokens; a stop string
    that the first token completes is not looked for until min_tokens tokens were made."""
    forced_end = {"logit_bias": {"2": 1000}}
    assert answer(served, **forced_end)["text"] == ""
    status, _, out = call(served.port, "POST", "/v1/completions", dict(
        {"model": "llama", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "min_tokens": 3}, **forced_end))
    assert (out["usage"]["completion_tokens"], out["choices"][0]["finish_reason"]) == (3, "stop")
    first = served.backend.served("llama").tokenizer.decode(greedy_ids(reference["llama"], PROMPT, 1, 256))
    assert answer(served, stop=[first])["text"] == ""
    assert answer(served, stop=[first], min_tokens=2)["text"].startswith(first)


def test_include_stop_str_in_output_ends_the_text_with_the_stop_string(served, reference):
    """The greedy text cut at a stop string taken from inside it: without the field the text ends before it,
    with it the text ends with it (whole and streamed alike)."""
    tok = served.backend.served("llama").tokenizer
    text = tok.decode(greedy_ids(reference["llama"], PROMPT, 8, 256))
    stop = text[len(text) // 2:len(text) // 2 + 2]
    before = text[:text.index(stop)]
    assert answer(served, stop=[stop])["text"] == before
    got = answer(served, stop=[stop], include_stop_str_in_output=True)
    assert (got["text"], got["finish_reason"]) == (before + stop, "stop")
    status, _, streamed = call(served.port, "POST", "/v1/completions", {
        "model": "llama", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stop": [stop],
        "include_stop_str_in_output": True, "stream": True})
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    assert status == 200 and "".join(c["choices"][0]["text"] for c in chunks) == before + stop


def test_return_tokens_as_token_ids_names_every_logprobs_token_by_its_id(served, reference):
    tokens = greedy_ids(reference["llama"], PROMPT, 4, 256)
    plain = answer(served, max_tokens=4, logprobs=2)["logprobs"]
    named = answer(served, max_tokens=4, logprobs=2, return_tokens_as_token_ids=True)["logprobs"]
    assert named["tokens"] == [f"token_id:{t}" for t in tokens] and named["token_logprobs"] == plain["token_logprobs"]
    tok = served.backend.served("llama").tokenizer
    spelled, spell = TokenText(tok), tok.token_bytes
    for top, ids_top in zip(plain["top_logprobs"], named["top_logprobs"]):
        assert sorted(ids_top.values()) == sorted(top.values())
        assert all(spelled(int(k.removeprefix("token_id:")))[0] in top for k in ids_top)
    status, _, chat = call(served.port, "POST", "/v1/chat/completions", {
        "model": "llama", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0,
        "logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True})
    content = chat["choices"][0]["logprobs"]["content"]
    assert status == 200 and all(re.fullmatch(r"token_id:\d+", e["token"]) for e in content)
    assert all(re.fullmatch(r"token_id:\d+", t["token"]) for e in content for t in e["top_logprobs"])
    assert all(e["bytes"] == list(spell(int(e["token"][9:]))) for e in content)  # the token's own bytes


def test_add_special_tokens_false_leaves_the_bos_off_a_text_prompt(served, reference):
    tok = served.backend.served("llama").tokenizer
    ids = tok.encode("Once upon a time", add_special=False, parse_special=True)
    assert tok.encode("Once upon a time", add_special=True, parse_special=True) == [tok.bos_id] + ids
    got = answer(served, prompt="Once upon a time", max_tokens=4, add_special_tokens=False)
    status, _, out = call(served.port, "POST", "/v1/completions", {
        "model": "llama", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0,
        "add_special_tokens": False})
    assert out["usage"]["prompt_tokens"] == len(ids)
    assert got["text"] == tok.decode(greedy_ids(reference["llama"], ids, 4, 256))
    chat = {"model": "llama", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    assert call(served.port, "POST", "/v1/chat/completions", dict(chat, add_special_tokens=False))[0] == 200
    assert call(served.port, "POST", "/v1/chat/completions", dict(chat, add_special_tokens=True))[0] == 400


def test_allowed_token_ids_are_all_the_answer_is_made_of(served, reference):
    """A hot sampler (the die draws anywhere in the vocabulary) kept to three tokens; the logprobs stay the
    model's own distribution (before the mask), so they are not renormalized to the three."""
    allowed = [300, 301, 302]
    got = answer(served, max_tokens=8, temperature=5.0, top_k=0, seed=3, allowed_token_ids=allowed, logprobs=0,
                 return_tokens_as_token_ids=True, logit_bias={"2": -100})
    ids = [int(t.removeprefix("token_id:")) for t in got["logprobs"]["tokens"]]
    assert len(ids) == 8 and set(ids) <= set(allowed)
    assert sum(math.exp(v) for v in got["logprobs"]["token_logprobs"]) < 8 * 0.9  # not the masked distribution
    free = answer(served, max_tokens=8, temperature=5.0, top_k=0, seed=3, logprobs=0, return_tokens_as_token_ids=True,
                  logit_bias={"2": -100})
    assert not set(int(t.removeprefix("token_id:")) for t in free["logprobs"]["tokens"]) <= set(allowed)


@pytest.mark.parametrize("value", [[], [10**6], [-1], "300", [1.5]])
def test_a_bad_allowed_token_ids_is_a_400_naming_it(served, value):
    status, _, out = call(served.port, "POST", "/v1/completions", {"model": "llama", "prompt": PROMPT,
                                                                   "allowed_token_ids": value})
    assert status == 400 and out["error"]["param"].startswith("allowed_token_ids"), out


def test_bad_words_keep_a_word_out_of_the_answer(served, reference):
    """vLLM's tokenization of a word (as the text begins with it, and after a space) and its ban on the die."""
    tok = served.backend.served("llama").tokenizer
    free = greedy_ids(reference["llama"], PROMPT, 8, 256)
    # the first whole word the model writes (a subword piece is not a word: vLLM's forms of it differ)
    at = next(i for i, t in enumerate(free) if (t,) in bad_word_ids(tok, [tok.decode([t]).strip()]))
    got = answer(served, max_tokens=8, logprobs=0, return_tokens_as_token_ids=True,
                 bad_words=[tok.decode([free[at]]).strip()])
    ids = [int(t.removeprefix("token_id:")) for t in got["logprobs"]["tokens"]]
    assert ids[:at] == free[:at] and free[at] not in ids


@pytest.mark.parametrize("value", [["  "], [""], "word", [5], ["x"] * 257])
def test_a_bad_bad_words_is_a_400_naming_it(served, value):
    status, _, out = call(served.port, "POST", "/v1/completions", {"model": "llama", "prompt": PROMPT,
                                                                   "bad_words": value})
    assert status == 400 and out["error"]["param"].startswith("bad_words"), out


def test_documents_reach_the_chat_template_as_its_documents_variable():
    """Granite 3.3's template writes each document as a document turn; the kwargs' own documents win."""
    template = shared_path("templates", "ibm-granite-granite-3.3-2B-Instruct.jinja").read_text()
    server = Served(open_models(("qwen2",)), chat_templates={"qwen2": template})
    docs = [{"doc_id": "7", "text": "The moon is made of basalt."}]
    ask = {"messages": [{"role": "user", "content": "What is the moon made of?"}]}
    try:
        bodies = {"plain": {}, "field": {"documents": docs}, "kwargs": {"chat_template_kwargs": {"documents": docs}},
                  "both": {"documents": [{"doc_id": "1", "text": "x"}], "chat_template_kwargs": {"documents": docs}}}
        prompt = {name: call(server.port, "POST", "/apply-template", dict(ask, **extra))[2]["prompt"]
                  for name, extra in bodies.items()}
        status, _, out = call(server.port, "POST", "/v1/chat/completions", dict(
            ask, model="qwen2", max_tokens=1, documents=[{"doc_id": 1}]))
    finally:
        server.close()
    turn = '<|start_of_role|>document {"document_id": "7"}<|end_of_role|>\nThe moon is made of basalt.<|end_of_text|>'
    assert turn in prompt["field"] and turn not in prompt["plain"]
    assert prompt["field"] == prompt["kwargs"] == prompt["both"]
    assert status == 400 and out["error"]["param"] == "documents[0].doc_id", out


def test_return_token_ids_shows_the_prompts_ids_and_the_generated_ones_with_the_end_token(served, reference):
    """vLLM's shape: completions per choice, chat's prompt ids beside the choices; streamed, the first chunk
    carries the prompt's and each chunk the ids since the last, the end token on the last."""
    tokens = greedy_ids(reference["llama"], PROMPT, 8, 256)
    stop = next(t for t in tokens[2:] if t not in tokens[:2])
    want = tokens[:tokens.index(stop)] + [stop]
    got = answer(served, stop_token_ids=[stop], return_token_ids=True)
    assert (got["prompt_token_ids"], got["token_ids"]) == (PROMPT, want)
    assert "token_ids" not in answer(served)
    status, _, streamed = call(served.port, "POST", "/v1/completions", {
        "model": "llama", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stop_token_ids": [stop],
        "return_token_ids": True, "stream": True})
    chunks = [json.loads(b[6:])["choices"][0] for b in streamed.split("\n\n") if b.startswith("data: {")]
    assert status == 200 and chunks[0]["prompt_token_ids"] == PROMPT
    assert [t for c in chunks for t in c["token_ids"]] == want and chunks[-1]["token_ids"][-1] == stop
    prompts = served.backend.served("llama").prompts
    messages = [{"role": "user", "content": "Hi"}]
    for stream in (False, True):
        status, _, chat = call(served.port, "POST", "/v1/chat/completions", {
            "model": "llama", "messages": messages, "max_tokens": 5, "temperature": 0, "return_token_ids": True,
            "stream": stream, "logit_bias": {"2": -100}})
        prompt_ids = prompts.encode_chat(prompts.render(messages))
        if stream:
            chunks = [json.loads(b[6:]) for b in chat.split("\n\n") if b.startswith("data: {")]
            ids, first = [t for c in chunks for t in c["choices"][0]["token_ids"]], chunks[0]
        else:
            ids, first = chat["choices"][0]["token_ids"], chat
        assert status == 200 and first["prompt_token_ids"] == prompt_ids
        assert ids == greedy_ids(reference["llama"], prompt_ids, 5, 256)


@pytest.mark.parametrize("route, prefix, body", [
    ("/v1/completions", "cmpl-", {"prompt": PROMPT}),
    ("/v1/chat/completions", "chatcmpl-", {"messages": [{"role": "user", "content": "Hi"}]})])
def test_request_id_names_the_answer_whole_and_streamed(served, route, prefix, body):
    ask = dict(body, model="llama", max_tokens=2, request_id="run-7.step:3")
    status, _, whole = call(served.port, "POST", route, ask)
    assert status == 200 and whole["id"] == prefix + "run-7.step:3"
    status, _, streamed = call(served.port, "POST", route, dict(ask, stream=True))
    ids = {json.loads(b[6:])["id"] for b in streamed.split("\n\n") if b.startswith("data: {")}
    assert status == 200 and ids == {prefix + "run-7.step:3"}
    assert call(served.port, "POST", route, dict(body, model="llama", max_tokens=2))[2]["id"] != whole["id"]
    for bad in ("has space", "", "x" * 129, 5):
        status, _, out = call(served.port, "POST", route, dict(ask, request_id=bad))
        assert status == 400 and out["error"]["param"] == "request_id", out


def test_continuous_usage_stats_puts_the_usage_so_far_on_every_chunk(served):
    """vLLM's: with include_usage, each text chunk's usage counts the tokens so far (the answer's text so far
    tokenizes to as many), the choice's last chunk the whole; OpenAI's include_obfuscation changes nothing."""
    ask = {"model": "llama", "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "stream": True,
           "logit_bias": {"2": -100}, "return_token_ids": True,
           "stream_options": {"include_usage": True, "continuous_usage_stats": True, "include_obfuscation": False}}
    status, _, streamed = call(served.port, "POST", "/v1/completions", ask)
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    assert status == 200 and chunks[-1]["choices"] == []
    sent = 0
    for chunk in chunks[:-1]:
        sent += len(chunk["choices"][0]["token_ids"])
        assert chunk["usage"]["prompt_tokens"] == len(PROMPT) and chunk["usage"]["completion_tokens"] == sent
    assert chunks[-2]["usage"] == chunks[-1]["usage"] and chunks[-1]["usage"]["completion_tokens"] == 6
    plain = dict(ask, stream_options={"include_usage": True})
    status, _, streamed = call(served.port, "POST", "/v1/completions", plain)
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    assert [c["usage"] is None for c in chunks] == [True] * (len(chunks) - 1) + [False]
    status, _, out = call(served.port, "POST", "/v1/completions", dict(ask, stream_options={"include_usages": True}))
    assert status == 400 and out["error"]["param"] == "stream_options.include_usages", out


@pytest.mark.parametrize("private", [{"cache_salt": "tenant-a"}, {"cache_prompt": False}])
def test_a_salted_or_uncached_request_shares_no_kept_cache(served, private):
    """vLLM's cache_salt (here: shared with no other request) and llama-server's cache_prompt false: such a
    request neither reuses a kept prompt nor leaves its own; an ordinary one after an ordinary one does."""
    start = 700 if "cache_salt" in private else 800  # a prompt no other test has left in the cache
    prompt = [1] + list(range(start, start + 60))
    ask = {"model": "llama", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    cached = lambda extra: call(served.port, "POST", "/v1/completions", dict(ask, **extra))[2]["usage"][
        "prompt_tokens_details"]["cached_tokens"]
    assert [cached(private), cached(private), cached({}), cached(private), cached({})] == [0, 0, 0, 0, 60]
    for bad in (5, ""):
        status, _, out = call(served.port, "POST", "/v1/completions", dict(ask, cache_salt=bad))
        assert status == 400 and out["error"]["param"] == "cache_salt", out
