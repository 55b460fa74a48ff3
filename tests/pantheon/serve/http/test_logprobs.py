"""logprobs / top_logprobs over HTTP (official openai client) and lists of prompts on /v1/completions."""

import json

import numpy as np
import pytest

from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.serve.http.logprobs import TokenText
from pantheon.text.prompting import PromptBuilder
from tests.pantheon.serve.http.server import call
from tests.pantheon.serve.http.test_errors import error_of

NO_EOS = {"2": -100}  # both golden vocabularies end generation with id 2; banned, length decides
TOL = 1e-4  # batched decode in the server vs one teacher-forced forward here: float32 summation order
CHAT = [{"role": "user", "content": "Name a colour."}]


def greedy(model, ids, n):
    engine = Engine(model, EngineConfig(n_ctx=256))
    engine.add(Request(1, tuple(ids), n, SamplingParams(temperature=0.0, logit_bias={2: -100.0})))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return out


def log_softmax_rows(model, ids, tokens):
    """float64 log_softmax of the rows that predict each generated token (one teacher-forced forward)."""
    rows = np.asarray(model.logits(list(ids) + tokens[:-1])[len(ids) - 1:], np.float64)  # [n, n_vocab]
    peak = rows.max(axis=1, keepdims=True)  # [n, 1]
    return rows - peak - np.log(np.exp(rows - peak).sum(axis=1, keepdims=True))  # [n, n_vocab]


def test_completion_logprobs_equal_log_softmax_of_the_models_logits(client, reference):
    model, ids = reference["qwen2"], [1, 500, 600, 700]
    tokens = greedy(model, ids, 6)
    ref = log_softmax_rows(model, ids, tokens)
    out = client.completions.create(model="qwen2", prompt=ids, max_tokens=6, temperature=0, logit_bias=NO_EOS,
                                    logprobs=5)
    lp = out.choices[0].logprobs
    spell = TokenText(model.tokenizer)
    assert lp.tokens == [spell(t)[0] for t in tokens]
    np.testing.assert_allclose(lp.token_logprobs, [ref[i, t] for i, t in enumerate(tokens)], atol=TOL)
    for i, top in enumerate(lp.top_logprobs):
        best = np.argsort(-ref[i], kind="stable")[:5]  # [5]
        assert list(top) == list(dict.fromkeys(spell(int(t))[0] for t in best))  # best first
        assert top[lp.tokens[i]] == pytest.approx(lp.token_logprobs[i])  # greedy: the chosen one is there
    text = out.choices[0].text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    whole = [(o, t) for o, t in zip(lp.text_offset, lp.tokens) if not t.startswith("bytes:")]  # not a lone byte
    assert whole and all(text[o:].startswith(t) for o, t in whole)


def test_chat_logprobs_are_the_models_and_parse_in_the_openai_client(client, reference):
    model = reference["llama"]
    ids = PromptBuilder(model.tokenizer, model.gguf.metadata).chat(CHAT)
    tokens = greedy(model, ids, 5)
    ref = log_softmax_rows(model, ids, tokens)
    out = client.chat.completions.create(model="llama", messages=CHAT, max_tokens=5, temperature=0,
                                         logit_bias=NO_EOS, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert len(content) == 5
    for i, entry in enumerate(content):
        assert entry.logprob == pytest.approx(ref[i, tokens[i]], abs=TOL)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
        tops = entry.top_logprobs
        assert len(tops) == 3 and tops[0].token == entry.token  # greedy: the chosen token leads
        assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
    assert "".join(e.token for e in content) == out.choices[0].message.content


def test_chat_logprobs_without_top_logprobs_list_no_alternatives(client):
    out = client.chat.completions.create(model="qwen2", messages=CHAT, max_tokens=3, temperature=0,
                                         logprobs=True)
    assert all(e.top_logprobs == [] for e in out.choices[0].logprobs.content)
    plain = client.chat.completions.create(model="qwen2", messages=CHAT, max_tokens=3, temperature=0)
    assert plain.choices[0].logprobs is None


def test_streamed_logprobs_equal_non_streamed(client):
    kw = dict(model="qwen2", max_tokens=8, temperature=0, logit_bias=NO_EOS)
    whole = client.chat.completions.create(messages=CHAT, logprobs=True, top_logprobs=2, **kw)
    chunks = client.chat.completions.create(messages=CHAT, logprobs=True, top_logprobs=2, stream=True, **kw)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in whole.choices[0].logprobs.content]
    whole = client.completions.create(prompt="Once upon a time", logprobs=3, **kw)
    chunks = list(client.completions.create(prompt="Once upon a time", logprobs=3, stream=True, **kw))
    joined = {k: [v for c in chunks if c.choices[0].logprobs for v in getattr(c.choices[0].logprobs, k)]
              for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    assert joined == {k: getattr(whole.choices[0].logprobs, k) for k in joined}


def test_a_list_of_prompts_gives_one_choice_each_with_summed_usage(client):
    prompts = ["Once upon a time", "The capital of France is", "Hello"]
    kw = dict(model="qwen2", max_tokens=4, temperature=0, logit_bias=NO_EOS)
    alone = [client.completions.create(prompt=p, **kw) for p in prompts]
    out = client.completions.create(prompt=prompts, **kw)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert [c.text for c in out.choices] == [a.choices[0].text for a in alone]
    assert out.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert out.usage.completion_tokens == 12 and out.usage.total_tokens == out.usage.prompt_tokens + 12
    chunks = list(client.completions.create(prompt=prompts, stream=True, stream_options={"include_usage": True},
                                            **kw))
    for i, a in enumerate(alone):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.text for c in mine) == a.choices[0].text and mine[-1].finish_reason == "length"
    assert chunks[-1].usage.prompt_tokens == out.usage.prompt_tokens


def test_logprobs_for_a_list_of_token_prompts(client):
    prompts = [[1, 500, 600], [1, 700]]
    kw = dict(model="qwen2", max_tokens=3, temperature=0, logit_bias=NO_EOS, logprobs=2)
    alone = [client.completions.create(prompt=p, **kw).choices[0].logprobs for p in prompts]
    out = client.completions.create(prompt=prompts, **kw)
    for choice, single in zip(out.choices, alone):
        assert choice.logprobs.tokens == single.tokens
        np.testing.assert_allclose(choice.logprobs.token_logprobs, single.token_logprobs, atol=TOL)


def test_echo_with_logprobs_scores_the_prompt_as_lm_eval_reads_it(client, served, reference):
    """lm-evaluation-harness's loglikelihood request (echo, logprobs, max_tokens 1 over token ids): the
    prompt's tokens scored by the model's own logits, the first one null, then the completion's."""
    model, ids = reference["qwen2"], [1, 500, 600, 700, 800]
    plain = client.completions.create(model="qwen2", prompt=ids, max_tokens=2, temperature=0, logit_bias=NO_EOS,
                                      logprobs=2)
    out = client.completions.create(model="qwen2", prompt=ids, max_tokens=2, temperature=0, logit_bias=NO_EOS,
                                    logprobs=2, echo=True)
    lp, spell = out.choices[0].logprobs, TokenText(model.tokenizer)
    rows = np.asarray(model.logits(ids)[:-1], np.float64)  # [4, n_vocab] row i predicts ids[i + 1]
    ref = rows - rows.max(1, keepdims=True)
    ref -= np.log(np.exp(ref).sum(1, keepdims=True))
    assert lp.tokens[:5] == [spell(t)[0] for t in ids] and lp.tokens[5:] == plain.choices[0].logprobs.tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    np.testing.assert_allclose(lp.token_logprobs[1:5], [ref[i, t] for i, t in enumerate(ids[1:])], atol=TOL)
    np.testing.assert_allclose(lp.token_logprobs[5:], plain.choices[0].logprobs.token_logprobs, atol=TOL)
    for i, top in enumerate(lp.top_logprobs[1:5]):
        best = [spell(int(t))[0] for t in np.argsort(-ref[i], kind="stable")[:2]]
        assert list(top)[:2] == best and lp.tokens[i + 1] in top  # the prompt's own token always listed
    text = out.choices[0].text
    assert text == model.tokenizer.decode(ids) + plain.choices[0].text
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[5] == len(model.tokenizer.decode(ids))
    status, _, streamed = call(served.port, "POST", "/v1/completions", {
        "model": "qwen2", "prompt": ids, "max_tokens": 2, "temperature": 0, "logit_bias": NO_EOS, "logprobs": 2,
        "echo": True, "stream": True})
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    parts = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0].get("logprobs")]
    assert status == 200 and chunks[0]["choices"][0]["text"] == model.tokenizer.decode(ids)
    assert [t for p in parts for t in p["tokens"]] == lp.tokens
    assert [o for p in parts for o in p["text_offset"]] == lp.text_offset


def test_echo_with_logprobs_of_a_text_prompt_and_several_prompts(client):
    out = client.completions.create(model="qwen2", prompt=["Hello world", "Good"], max_tokens=1, temperature=0,
                                    logit_bias=NO_EOS, logprobs=0, echo=True)
    for choice, text in zip(out.choices, ["Hello world", "Good"]):
        lp = choice.logprobs
        assert choice.text.startswith(text) and lp.token_logprobs[0] is None
        assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:]) and len(lp.tokens) >= 2


def test_echo_with_logprobs_and_n_choices_scores_the_shared_prompt_in_each(client):
    out = client.completions.create(model="qwen2", prompt=[1, 500, 600, 700], max_tokens=2, temperature=1.0,
                                    seed=5, logprobs=1, echo=True, n=2)
    first, second = (c.logprobs for c in out.choices)
    assert first.tokens[:4] == second.tokens[:4] and first.token_logprobs[0] is None
    np.testing.assert_allclose(first.token_logprobs[1:4], second.token_logprobs[1:4])
    assert len(first.tokens) == len(second.tokens) == 6


def vllm_reference(model, ids, k):
    """vLLM's prompt_logprobs of `ids` from one teacher-forced forward: null, then per later token its logprob
    and rank (the tokens at least as likely) first, then its k best ranked 1..k."""
    rows = np.asarray(model.logits(ids)[:-1], np.float64)  # [len(ids) - 1, n_vocab] row i predicts ids[i + 1]
    rows -= rows.max(1, keepdims=True)
    rows -= np.log(np.exp(rows).sum(1, keepdims=True))
    out = [None]
    for row, t in zip(rows, ids[1:]):
        entry = {t: (row[t], int((row >= row[t]).sum()))}
        entry.update((int(b), (row[b], r)) for r, b in enumerate(np.argsort(-row, kind="stable")[:k], 1))
        out.append(entry)
    return out


def assert_vllm_prompt_logprobs(got, want, tokenizer):
    assert got[0] is None and len(got) == len(want)
    for entries, ref in zip(got[1:], want[1:]):
        assert [int(t) for t in entries] == list(ref)  # the token itself first, then its alternatives best first
        for t, e in entries.items():
            assert e["logprob"] == pytest.approx(ref[int(t)][0], abs=TOL) and e["rank"] == ref[int(t)][1]
            assert e["decoded_token"] == tokenizer.token_bytes(int(t)).decode("utf-8", errors="replace")


@pytest.mark.parametrize("k", [0, 3])
def test_vllm_prompt_logprobs_are_the_models_with_ranks(client, reference, k):
    """vLLM's prompt_logprobs on both routes (the openai client's extra_body; the answer's extra fields)."""
    model, ids = reference["qwen2"], [1, 500, 600, 700, 800]
    out = client.completions.create(model="qwen2", prompt=ids, max_tokens=1, temperature=0,
                                    extra_body={"prompt_logprobs": k})
    assert_vllm_prompt_logprobs(out.choices[0].prompt_logprobs, vllm_reference(model, ids, k), model.tokenizer)
    assert out.choices[0].logprobs is None  # the answer's own logprobs were not asked for
    chat = client.chat.completions.create(model="qwen2", messages=CHAT, max_tokens=1, temperature=0,
                                          extra_body={"prompt_logprobs": k})
    ids = PromptBuilder(model.tokenizer, model.gguf.metadata).chat(CHAT)
    assert len(ids) == chat.usage.prompt_tokens and not hasattr(chat.choices[0], "prompt_logprobs")
    assert_vllm_prompt_logprobs(chat.prompt_logprobs, vllm_reference(model, ids, k), model.tokenizer)


def test_vllm_prompt_logprobs_beside_echo_show_each_its_own_alternatives(client, reference):
    model, ids = reference["qwen2"], [1, 500, 600, 700]
    out = client.completions.create(model="qwen2", prompt=ids, max_tokens=2, temperature=0, logit_bias=NO_EOS,
                                    logprobs=1, echo=True, n=2, extra_body={"prompt_logprobs": 4})
    for choice in out.choices:
        assert all(len(top) <= 2 for top in choice.logprobs.top_logprobs[1:])  # echo's 1, its token beside
        assert_vllm_prompt_logprobs(choice.prompt_logprobs, vllm_reference(model, ids, 4), model.tokenizer)
    plain = client.completions.create(model="qwen2", prompt=ids, max_tokens=2, temperature=0, logit_bias=NO_EOS,
                                      logprobs=1, echo=True)
    assert out.choices[0].logprobs.top_logprobs == plain.choices[0].logprobs.top_logprobs


def test_vllm_prompt_logprobs_with_stream_follow_vllms_rule(served):
    """A stream has no place for them: a 400 when any are asked, a 0 dropped (as vLLM does)."""
    body = {"model": "qwen2", "prompt": [1, 500, 600], "max_tokens": 1, "stream": True}
    error_of(served, "/v1/completions", dict(body, prompt_logprobs=2), 400, param="prompt_logprobs")
    status, _, text = call(served.port, "POST", "/v1/completions", dict(body, prompt_logprobs=0))
    assert status == 200 and "prompt_logprobs" not in text and text.rstrip().endswith("[DONE]")


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": "2"}, "prompt_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "prompt_logprobs": 1.5}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": -1}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": True}, "logprobs"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": ["a", []]}, "prompt"),
    ("/v1/completions", {"prompt": ["a", 5]}, "prompt"),
    ("/v1/completions", {"prompt": ["a"] * 17}, "prompt"),
    ("/v1/completions", {"prompt": ["a", [1, 99999]]}, "prompt"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": 1}, "logprobs"),
])
def test_bad_logprobs_and_prompt_lists_are_typed_400s(served, path, body, param):
    err, _ = error_of(served, path, dict(body, model="qwen2", max_tokens=2), 400, param=param)
    assert err["type"] == "invalid_request_error"


def test_a_bad_prompt_in_a_list_starts_nothing(served):
    before = served.backend.stats()["qwen2"]
    error_of(served, "/v1/completions", {"model": "qwen2", "prompt": ["fine", [1, 99999]]}, 400, param="prompt")
    after = served.backend.stats()["qwen2"]
    assert {k: after[k] for k in ("completed", "aborted", "failed")} == \
        {k: before[k] for k in ("completed", "aborted", "failed")}
    status, _, ok = call(served.port, "POST", "/v1/completions", {"model": "qwen2", "prompt": ["a", "b"],
                                                                  "max_tokens": 1})
    assert status == 200 and [c["index"] for c in ok["choices"]] == [0, 1]
