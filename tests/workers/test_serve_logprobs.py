"""logprobs, n_probs, n choices and lists of prompts through pantheon-serve: ids and numbers over the rings,
text in the front."""

import json
import urllib.request

import numpy as np
import openai
import pytest

import pantheon
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.serve.http.completions import bad_word_ids
from tests.conftest import shared_path
from tests.pantheon.serve.http.test_logprobs import assert_vllm_prompt_logprobs, vllm_reference
from tests.workers.serving import Server

PROMPT = [1, 500, 600, 700]
NO_EOS = {"2": -100}
TOL = 1e-4


@pytest.fixture(scope="module")
def server():
    srv = Server(["--model", str(shared_path("golden", "qwen2-q8_0.gguf")), "--name", "qwen2", "--ctx-cap", "256",
                  "--http-workers", "1"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)


def reference(n):
    """(greedy tokens, float64 log_softmax rows predicting them) from an in-process engine and forward."""
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    engine = Engine(model, EngineConfig(n_ctx=64))
    engine.add(Request(1, tuple(PROMPT), n, SamplingParams(temperature=0.0, logit_bias={2: -100.0})))
    tokens = []
    while engine.has_work:
        tokens += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    rows = np.asarray(model.logits(PROMPT + tokens[:-1])[len(PROMPT) - 1:], np.float64)  # [n, n_vocab]
    rows -= rows.max(1, keepdims=True)
    return tokens, rows - np.log(np.exp(rows).sum(1, keepdims=True))  # [n, n_vocab]


def test_logprobs_over_the_rings_equal_log_softmax_of_the_models_logits(client):
    tokens, ref = reference(5)
    out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=5, temperature=0, logit_bias=NO_EOS,
                                    logprobs=4)
    lp = out.choices[0].logprobs
    np.testing.assert_allclose(lp.token_logprobs, [ref[i, t] for i, t in enumerate(tokens)], atol=TOL)
    assert all(len(top) >= 4 and max(top.values()) == pytest.approx(ref[i].max(), abs=TOL)
               for i, top in enumerate(lp.top_logprobs))
    chat = client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                          temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens and all(len(e.top_logprobs) == 2 for e in content)
    streamed = client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "Hi"}],
                                              max_tokens=4, temperature=0, logprobs=True, top_logprobs=2, stream=True)
    pieces = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in pieces] == [e.token for e in content]
    # the second run starts from the first's cached prompt (prefix cache): same numbers up to float32 order
    np.testing.assert_allclose([e.logprob for e in pieces], [e.logprob for e in content], atol=TOL)


def test_echo_with_logprobs_over_the_rings_scores_the_prompt(client):
    """The die scores every prompt token (PROMPT_LOGPROBS frames) before its first token."""
    tokens, ref = reference(2)
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    rows = np.asarray(model.logits(PROMPT)[:-1], np.float64)  # [3, n_vocab] row i predicts PROMPT[i + 1]
    rows -= rows.max(1, keepdims=True)
    rows -= np.log(np.exp(rows).sum(1, keepdims=True))
    for _ in range(2):  # the second time a kept cache holds the prompt: it is not used, its logits are gone
        out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=2, temperature=0,
                                        logit_bias=NO_EOS, logprobs=1, echo=True)
        lp = out.choices[0].logprobs
        assert lp.token_logprobs[0] is None and len(lp.tokens) == len(PROMPT) + 2
        np.testing.assert_allclose(lp.token_logprobs[1:4], [rows[i, t] for i, t in enumerate(PROMPT[1:])], atol=TOL)
        np.testing.assert_allclose(lp.token_logprobs[4:], [ref[i, t] for i, t in enumerate(tokens)], atol=TOL)


def test_vllm_prompt_logprobs_over_the_rings_carry_each_tokens_rank(client):
    """The rank is counted on the die (only it holds the whole row) and crosses in the PROMPT_LOGPROBS frame."""
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=1, temperature=0,
                                    extra_body={"prompt_logprobs": 2})
    assert_vllm_prompt_logprobs(out.choices[0].prompt_logprobs, vllm_reference(model, PROMPT, 2), model.tokenizer)


def test_allowed_token_ids_cross_the_ring_to_the_dies_sampler(client):
    allowed = [300, 301, 302]
    out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=6, temperature=5.0, seed=4,
                                    logit_bias=NO_EOS, logprobs=0,
                                    extra_body={"top_k": 0, "allowed_token_ids": allowed,
                                                "return_tokens_as_token_ids": True})
    ids = [int(t.removeprefix("token_id:")) for t in out.choices[0].logprobs.tokens]
    assert len(ids) == 6 and set(ids) <= set(allowed)


def test_bad_words_cross_the_ring_to_the_dies_engine(client):
    tokens, _ = reference(6)
    tok = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1).tokenizer
    at = next(i for i, t in enumerate(tokens) if (t,) in bad_word_ids(tok, [tok.decode([t]).strip()]))
    out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=6, temperature=0, logit_bias=NO_EOS,
                                    logprobs=0, extra_body={"bad_words": [tok.decode([tokens[at]]).strip()],
                                                            "return_tokens_as_token_ids": True})
    ids = [int(t.removeprefix("token_id:")) for t in out.choices[0].logprobs.tokens]
    assert ids[:at] == tokens[:at] and tokens[at] not in ids


def test_the_stop_token_crosses_the_ring_as_vllms_stop_reason(client):
    tokens, _ = reference(6)
    stop = next(t for t in tokens[2:] if t not in tokens[:2])
    out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=6, temperature=0, logit_bias=NO_EOS,
                                    extra_body={"stop_token_ids": [stop]})
    assert (out.choices[0].finish_reason, out.choices[0].stop_reason) == ("stop", stop)
    assert out.usage.completion_tokens == tokens.index(stop)


def test_a_private_request_crosses_the_ring_and_shares_no_cache(client):
    prompt = [1] + list(range(900, 940))
    cached = lambda **extra: client.completions.create(model="qwen2", prompt=prompt, max_tokens=1, temperature=0,
                                                       extra_body=extra).usage.prompt_tokens_details.cached_tokens
    assert [cached(cache_prompt=False), cached(cache_salt="a"), cached(), cached(cache_salt="a"), cached()] == \
        [0, 0, 0, 0, 40]


def test_a_list_of_prompts_over_the_rings(client):
    prompts = [PROMPT, "Once upon a time"]
    out = client.completions.create(model="qwen2", prompt=prompts, max_tokens=3, temperature=0, logit_bias=NO_EOS,
                                    logprobs=1)
    alone = [client.completions.create(model="qwen2", prompt=p, max_tokens=3, temperature=0, logit_bias=NO_EOS)
             for p in prompts]
    assert [c.index for c in out.choices] == [0, 1]
    assert [c.text for c in out.choices] == [a.choices[0].text for a in alone]
    assert all(len(c.logprobs.tokens) == 3 for c in out.choices)
    assert out.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)


def test_native_n_probs_over_the_rings(server):
    body = json.dumps({"prompt": PROMPT, "n_predict": 3, "temperature": 0, "n_probs": 2,
                       "logit_bias": [[2, False]]}).encode()
    req = urllib.request.Request(server.url + "/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        out = json.loads(resp.read())
    tokens, ref = reference(3)
    probs = out["completion_probabilities"]
    assert [p["id"] for p in probs] == tokens
    np.testing.assert_allclose([p["logprob"] for p in probs], [ref[i, t] for i, t in enumerate(tokens)], atol=TOL)
    assert [p["top_logprobs"][0]["id"] for p in probs] == [int(r.argmax()) for r in ref]


HOT = dict(temperature=100.0, top_p=1.0, seed=11, logit_bias=NO_EOS, extra_body={"top_k": 0, "min_p": 0.0})


def alone(seed, n):
    """What one choice with `seed` gives by itself, from an in-process engine (the reference)."""
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    engine = Engine(model, EngineConfig(n_ctx=64))
    engine.add(Request(1, tuple(PROMPT), n, SamplingParams(temperature=100.0, top_k=0, top_p=1.0, min_p=0.0,
                                                           seed=seed, logit_bias={2: -100.0})))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return model.tokenizer.decode(out)


def test_n_choices_over_the_rings_are_each_seeds_own(client):
    out = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=5, n=3, **HOT)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert [c.text for c in out.choices] == [alone(HOT["seed"] + i, 5) for i in range(3)]
    assert len({c.text for c in out.choices}) == 3
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (len(PROMPT), 15)
    text = {0: "", 1: "", 2: ""}
    for chunk in client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=5, n=3, stream=True, **HOT):
        for c in chunk.choices:
            text[c.index] += c.text
    assert [text[i] for i in range(3)] == [c.text for c in out.choices]


def test_a_stop_string_over_the_rings_ends_only_its_choice(client):
    first = [c.text for c in client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=12, n=2,
                                                           **HOT).choices]
    cut = next((i for i in range(1, len(first[0])) if first[0][i:i + 2].strip()
                and first[0][i:i + 2] not in first[1]), None)
    if cut is None:
        pytest.skip(f"no stop string of choice 0 absent from choice 1 in {first!r}")
    again = client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=12, n=2, stop=[first[0][cut:cut + 2]],
                                      **HOT)
    assert [(c.text, c.finish_reason) for c in again.choices] == [(first[0][:cut], "stop"), (first[1], "length")]


def test_more_choices_than_the_die_decodes_together_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="at most 4 choices"):
        client.completions.create(model="qwen2", prompt=PROMPT, max_tokens=2, n=5)
