"""The step engine: greedy output equals llama.cpp's, batching, aborts, stops, sessions reuse KV."""

import numpy as np
import pytest

import pantheon
from pantheon.engine import scheduler
from pantheon.engine.infill import infill
from pantheon.engine.scheduler import (DoneEvent, EmbeddingEvent, Engine, EngineConfig, PromptLogprobsEvent, Request,
                                       TokenEvent)
from pantheon.errors import ContextOverflow, EngineError
from pantheon.engine.sampler import SamplingParams
from tests.conftest import shared_path

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def golden():
    # qwen2-q8_0: llama.cpp's margin is above 1.0 at each of its first 15 greedy steps, so an exact
    # float32 engine must take the same path (llama-q8_0 has a near-tie at step 2).
    path = shared_path("golden", "qwen2-q8_0.gguf")
    ref = np.load(path.with_suffix(".npz"))
    return pantheon.open_model(str(path), threads=2), ref


def run(engine):
    events = []
    while engine.has_work:
        events += engine.step()
    return events


def tokens_of(events, rid):
    return [e.token for e in events if isinstance(e, TokenEvent) and e.id == rid]


def done_of(events, rid):
    done = [e for e in events if isinstance(e, DoneEvent) and e.id == rid]
    assert len(done) == 1, done
    return done[0]


def test_greedy_generation_matches_llama_cpp(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, prompt, max_tokens=12, params=GREEDY))
    events = run(engine)
    assert tokens_of(events, 1) == ref["greedy"][:12].tolist()
    assert done_of(events, 1).reason == "length"


def test_concurrent_requests_in_one_batch_match_alone(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128, max_batch=4, prefill_chunk=8))
    for rid, cut in enumerate((16, 11, 5, 14)):
        engine.add(Request(rid, prompt[:cut], max_tokens=6, params=GREEDY))
    events = run(engine)
    for rid, cut in enumerate((16, 11, 5, 14)):
        alone = Engine(model, EngineConfig(n_ctx=128))
        alone.add(Request(0, prompt[:cut], max_tokens=6, params=GREEDY))
        assert tokens_of(events, rid) == tokens_of(run(alone), 0)
        assert [e.index for e in events if isinstance(e, TokenEvent) and e.id == rid] == list(range(6))


def test_stop_token_ends_without_emitting_it(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128))
    stop = int(ref["greedy"][3])
    engine.add(Request(5, prompt, max_tokens=10, params=GREEDY, stop_ids=frozenset({stop})))
    events = run(engine)
    assert tokens_of(events, 5) == ref["greedy"][:3].tolist()
    assert done_of(events, 5).reason == "stop"


def test_min_tokens_holds_the_stop_tokens_off_until_that_many_were_made(golden):
    """A stop token made the certain pick by a bias: the answer ends at once, or after min_tokens others."""
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    for min_tokens in (0, 4):
        engine = Engine(model, EngineConfig(n_ctx=128))
        params = SamplingParams(temperature=0.0, logit_bias={2: 1000.0}, min_tokens=min_tokens)
        engine.add(Request(1, prompt, max_tokens=10, params=params, stop_ids=frozenset({2})))
        events = run(engine)
        assert len(tokens_of(events, 1)) == min_tokens and 2 not in tokens_of(events, 1)
        assert done_of(events, 1).reason == "stop"


def test_abort_ends_exactly_once(golden):
    model, ref = golden
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, (1, 2, 3), max_tokens=50, params=GREEDY))
    engine.add(Request(2, (1, 2, 3), max_tokens=50, params=GREEDY))
    engine.step()
    engine.abort(1)
    engine.abort(99)
    events = run(engine)
    assert done_of(events, 1).reason == "abort"
    assert done_of(events, 2).reason == "length" and len(tokens_of(events, 2)) == 49


def test_session_reuses_prefix_cache(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, prompt, max_tokens=4, params=GREEDY, session="s"))
    first = run(engine)
    turn2 = prompt + tuple(tokens_of(first, 1)) + (7, 8, 9)
    engine.add(Request(2, turn2, max_tokens=3, params=GREEDY, session="s"))
    second = run(engine)
    assert done_of(second, 2).cached_tokens >= len(prompt)
    fresh = Engine(model, EngineConfig(n_ctx=128))
    fresh.add(Request(3, turn2, max_tokens=3, params=GREEDY))
    assert tokens_of(second, 2) == tokens_of(run(fresh), 3)


def test_invalid_requests_change_nothing(golden):
    model, _ = golden
    engine = Engine(model, EngineConfig(n_ctx=16))
    with pytest.raises(ContextOverflow):
        engine.add(Request(1, tuple(range(1, 20))))
    with pytest.raises(EngineError):
        engine.add(Request(2, ()))
    with pytest.raises(EngineError):
        engine.add(Request(3, (1,), max_tokens=-1))
    assert not engine.has_work


def test_reasoning_budget_forces_think_close(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    greedy = ref["greedy"].tolist()
    open_id, close_id = prompt[-1], 17  # the prompt ends inside a "think" block opened by its last token
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, prompt, max_tokens=6, params=GREEDY, reasoning_budget=3, think_ids=(open_id, close_id)))
    out = tokens_of(run(engine), 1)
    assert out[:3] == greedy[:3] and out[3] == close_id


def test_a_sampler_that_raises_ends_only_its_request(golden):
    model, _ = golden
    engine = Engine(model, EngineConfig(n_ctx=64, max_batch=2))
    engine.add(Request(1, (1, 2, 3), 4, GREEDY))
    engine.add(Request(2, (1, 2, 3), 4, GREEDY))
    engine.step()  # both admitted; now break request 1's sampler

    def boom(*_):
        raise FloatingPointError("poison")

    engine.running[1, 0].sampler.sample = boom
    events = run(engine)
    assert done_of(events, 1).reason == "error" and "poison" in done_of(events, 1).message
    assert done_of(events, 2).reason == "length" and len(tokens_of(events, 2)) == 3


def test_fail_all_ends_every_request_with_an_error(golden):
    model, _ = golden
    engine = Engine(model, EngineConfig(n_ctx=64, max_batch=1))
    engine.add(Request(1, (1, 2, 3), 4, GREEDY))
    engine.add(Request(2, (1, 2, 3), 4, GREEDY))
    engine.step()
    events = engine.fail_all("broken")
    assert sorted(e.id for e in events) == [1, 2] and {e.reason for e in events} == {"error"}
    assert not engine.has_work


def test_repeated_prompt_without_session_reuses_the_prefix(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    longer = prompt + tuple(ref["greedy"][:3].tolist()) + (11, 12)
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, longer, max_tokens=4, params=GREEDY))
    first = run(engine)
    assert done_of(first, 1).cached_tokens == 0 and engine.prefilled == len(longer)
    engine.add(Request(2, longer, max_tokens=4, params=GREEDY))
    second = run(engine)
    assert done_of(second, 2).cached_tokens == len(longer) - 1  # the last token runs for its logits
    assert engine.prefilled == len(longer) + 1
    assert tokens_of(second, 2) == tokens_of(first, 1)
    engine.add(Request(3, prompt, max_tokens=5, params=GREEDY))  # a prefix of what is kept
    third = run(engine)
    assert done_of(third, 3).cached_tokens == len(prompt) - 1
    assert tokens_of(third, 3) == ref["greedy"][:5].tolist()


def test_a_private_request_neither_starts_from_a_kept_cache_nor_leaves_one(golden):
    """vLLM's cache_salt, llama-server's cache_prompt false: the same answer, computed from scratch, and the
    request after it finds nothing of it kept (as it does after an ordinary one)."""
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, prompt, max_tokens=4, params=GREEDY))
    ordinary = run(engine)
    engine.add(Request(2, prompt, max_tokens=4, params=GREEDY, private=True, session="s"))
    private = run(engine)
    assert done_of(private, 2).cached_tokens == 0 and tokens_of(private, 2) == tokens_of(ordinary, 1)
    engine.drop_cached()
    engine.add(Request(3, prompt, max_tokens=4, params=GREEDY, private=True, session="s"))
    run(engine)
    engine.add(Request(4, prompt, max_tokens=4, params=GREEDY, session="s"))
    assert done_of(run(engine), 4).cached_tokens == 0
    engine.add(Request(5, prompt, max_tokens=4, params=GREEDY))
    assert done_of(run(engine), 5).cached_tokens == len(prompt) - 1


def test_max_tokens_zero_only_computes_the_prompt_into_the_cache(golden):
    """llama-server's n_predict 0 (llama.vim warms its context so): no token, and the next request with
    that prompt as its prefix finds it cached."""
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, prompt, max_tokens=0, params=GREEDY, n=2))
    warm = run(engine)
    assert tokens_of(warm, 1) == [] and engine.prefilled == len(prompt) and not engine.running
    ends = [e for e in warm if isinstance(e, DoneEvent)]
    assert [(e.reason, e.completion_tokens, e.choice) for e in ends] == [("length", 0, 0), ("length", 0, 1)]
    assert [e.final for e in ends] == [False, True]
    engine.add(Request(2, prompt + (11, 12), max_tokens=3, params=GREEDY))
    assert done_of(run(engine), 2).cached_tokens == len(prompt)


def test_kept_caches_are_bounded_and_dropped_under_pressure(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128, max_sessions=2))
    for rid, first in enumerate((1, 2, 3)):  # three different 16-token prompts: only two caches kept
        engine.add(Request(rid, (first,) + prompt[1:], max_tokens=2, params=GREEDY))
        run(engine)
    assert len(engine.store) == 2
    engine.add(Request(9, (1,) + prompt[1:], max_tokens=2, params=GREEDY))
    assert done_of(run(engine), 9).cached_tokens == 0  # the least recently used went first
    engine.drop_cached()
    assert len(engine.store) == 0
    engine.add(Request(10, prompt, max_tokens=3, params=GREEDY))
    events = run(engine)
    assert done_of(events, 10).cached_tokens == 0 and tokens_of(events, 10) == ref["greedy"][:3].tolist()


def test_n_choices_share_one_prefill_and_a_seed_reproduces_each(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    # this golden model puts 0.99999 on its favourite token: only a very high temperature spreads the choices
    hot = SamplingParams(temperature=100.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    engine = Engine(model, EngineConfig(n_ctx=128, max_batch=4))
    engine.add(Request(1, prompt, max_tokens=6, params=hot, n=3))
    events = run(engine)
    assert engine.prefilled == len(prompt)  # one prompt prefill for three choices
    choices = [[e.token for e in events if isinstance(e, TokenEvent) and e.choice == i] for i in range(3)]
    assert len({tuple(c) for c in choices}) == 3
    done = [e for e in events if isinstance(e, DoneEvent)]
    assert sorted(e.choice for e in done) == [0, 1, 2] and [e.final for e in done].count(True) == 1
    assert done[-1].final and all(e.prompt_tokens == len(prompt) for e in done)
    for i, choice in enumerate(choices):  # choice i is what seed 7 + i gives alone
        alone = Engine(model, EngineConfig(n_ctx=128))
        alone.add(Request(1, prompt, max_tokens=6, params=SamplingParams(
            temperature=100.0, top_k=0, top_p=1.0, min_p=0.0, seed=7 + i)))
        assert tokens_of(run(alone), 1) == choice


def test_n_is_bounded_and_an_abort_ends_every_choice(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128, max_batch=2))
    for bad in (0, 3):
        with pytest.raises(EngineError):
            engine.add(Request(1, prompt, max_tokens=4, params=GREEDY, n=bad))
    assert not engine.has_work
    engine.add(Request(1, prompt, max_tokens=40, params=GREEDY, n=2))
    engine.step()
    engine.step()
    engine.abort(1)
    done = [e for e in run(engine) if isinstance(e, DoneEvent)]
    assert sorted((e.choice, e.reason) for e in done) == [(0, "abort"), (1, "abort")]
    assert [e.final for e in done] == [False, True]


def test_aborting_one_choice_leaves_the_others_running(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128, max_batch=2))
    engine.add(Request(1, prompt, max_tokens=12, params=GREEDY, n=2))
    engine.step()
    engine.step()
    engine.abort(1, choice=1)
    engine.abort(1, choice=5)  # no such choice: ignored
    events = run(engine)
    done = [e for e in events if isinstance(e, DoneEvent)]
    assert [(e.choice, e.reason, e.final) for e in done] == [(1, "abort", False), (0, "length", True)]
    assert len([e for e in events if isinstance(e, TokenEvent) and e.choice == 0]) >= 10


def test_the_infill_sampler_reads_the_models_token_texts(golden):
    """Greedy infill in the engine against a step-by-step loop over the model's own logits: the top 8,
    llama.cpp's infill rule on the model's token texts, the best survivor (an end: the stop id)."""
    model, ref = golden
    prompt = tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())
    engine = Engine(model, EngineConfig(n_ctx=128))
    params = SamplingParams(temperature=0.0, top_k=8, top_p=1.0, min_p=0.0, infill=True)
    engine.add(Request(1, prompt, max_tokens=6, params=params, stop_ids=frozenset({2})))
    got = tokens_of(run(engine), 1)
    cache, want, feed = model.new_cache(128), [], list(prompt)
    while len(want) < 6:
        row = np.asarray(model.forward([(cache, feed)])[0][-1], dtype=np.float32)  # [n_vocab]
        ids = np.argsort(-row, kind="stable")[:8]  # [8]
        left = infill(ids, row[ids], (2,), model.tokenizer.token_bytes)
        tok = 2 if left is None else int(left[0][np.argmax(left[1])])
        if tok == 2:
            break
        want.append(tok)
        feed = [tok]
    assert got == want


def embedding_of(events, rid):
    vecs = [e.vector for e in events if isinstance(e, EmbeddingEvent) and e.id == rid]
    assert len(vecs) == 1, vecs
    return vecs[0]


@pytest.mark.parametrize("pooling, pick", [("mean", lambda h: h.mean(0)), ("cls", lambda h: h[0]),
                                           ("last", lambda h: h[-1])])
def test_embedding_pools_the_prompts_hidden_states(golden, pooling, pick):
    """Chunked prefill (5 tokens a step) beside a decoding request pools the same vector as one pass."""
    model, ref = golden
    prompt = tuple(ref["tokens"][:16].tolist())
    hidden = model.forward([(model.new_cache(64), prompt)], hidden=[0])[0]  # [16, dim]
    engine = Engine(model, EngineConfig(n_ctx=64, prefill_chunk=5))
    engine.add(Request(1, prompt[:6], max_tokens=4, params=GREEDY))
    engine.add(Request(2, prompt, max_tokens=0, embed=pooling))
    events = run(engine)
    got = embedding_of(events, 2)
    assert got.dtype == np.float32 and got.shape == (model.config.dim,)
    np.testing.assert_allclose(got, pick(hidden), rtol=1e-4, atol=1e-4)
    done = done_of(events, 2)
    assert (done.reason, done.completion_tokens, done.prompt_tokens) == ("stop", 0, 16)
    assert not tokens_of(events, 2) and len(tokens_of(events, 1)) == 4


def test_last_pooling_reuses_the_prefix_cache_and_mean_does_not(golden):
    model, ref = golden
    prompt = tuple(ref["tokens"].tolist())  # 31 tokens: a kept 20-token cache shares a whole block
    engine = Engine(model, EngineConfig(n_ctx=64))
    engine.add(Request(1, prompt[:20], max_tokens=1, params=GREEDY))
    run(engine)
    engine.add(Request(2, prompt, max_tokens=0, embed="last"))
    engine.add(Request(3, prompt, max_tokens=0, embed="mean"))
    events = run(engine)
    assert done_of(events, 2).cached_tokens == 20 and done_of(events, 3).cached_tokens == 0
    hidden = model.forward([(model.new_cache(64), prompt)], hidden=[0])[0]  # [31, dim]
    np.testing.assert_allclose(embedding_of(events, 2), hidden[-1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(embedding_of(events, 3), hidden.mean(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fields", [dict(embed="max"), dict(embed="mean", max_tokens=3),
                                    dict(embed="last", n=2), dict(embed="cls", logprobs=1)])
def test_malformed_embedding_requests_are_refused(golden, fields):
    model, _ = golden
    engine = Engine(model, EngineConfig(n_ctx=64))
    with pytest.raises(EngineError):
        engine.add(Request(1, (1, 2, 3), **dict(dict(max_tokens=0), **fields)))
    assert not engine.has_work


def test_prompt_logprobs_are_llama_cpps_scored_in_chunks_and_come_before_the_first_token(golden):
    """Each prompt token from the second on, scored by the logits before it (llama.cpp's, teacher forced):
    a kept cache holding the prompt is not used, since its positions' logits are gone."""
    model, ref = golden
    prompt = tuple(ref["tokens"][:16].tolist())
    engine = Engine(model, EngineConfig(n_ctx=64, prefill_chunk=5))
    engine.add(Request(1, prompt + (7,), max_tokens=1, params=GREEDY))
    run(engine)
    engine.add(Request(2, prompt, max_tokens=2, params=GREEDY, prompt_logprobs=3))
    events = [e for e in run(engine) if e.id == 2]
    scored = [e for e in events if isinstance(e, PromptLogprobsEvent)]
    assert [e.start for e in scored] == [1, 6, 11, 16][:len(scored)] and len(scored) == 3  # chunks of 5 tokens
    assert isinstance(events[len(scored)], TokenEvent) and done_of(events, 2).cached_tokens == 0
    scores = [s for e in scored for s in e.scores]
    assert [s.token for s in scores] == list(prompt[1:])
    got = np.array([s.logprob for s in scores])

    def log_softmax(logits):
        x = logits.astype(np.float64) - logits.max(1, keepdims=True)  # [15, n_vocab]
        return x - np.log(np.exp(x).sum(1, keepdims=True))

    ours = log_softmax(model.logits(list(prompt))[:15])  # row p predicts token p + 1; one pass, no chunks
    np.testing.assert_allclose(got, ours[np.arange(15), list(prompt[1:])], rtol=1e-4, atol=1e-3)
    lcpp = log_softmax(ref["logits"][:15])  # random weights: logprobs near -100, llama.cpp's within 2 %
    np.testing.assert_allclose(got, lcpp[np.arange(15), list(prompt[1:])], rtol=0.03)
    assert all(len(s.top) == 3 and s.top[0][0] == int(np.argmax(w)) for s, w in zip(scores, ours))
    ranks = np.array([s.rank for s in scores])  # vLLM's: the tokens at least as likely, itself included
    assert list(ranks) == [int((w >= w[t]).sum()) for w, t in zip(ours, prompt[1:])]
    lcpp_ranks = np.array([(w >= w[t]).sum() for w, t in zip(lcpp, prompt[1:])])  # random weights: prompt
    np.testing.assert_allclose(ranks, lcpp_ranks, rtol=0.05, atol=2)  # in the thousands; logits within 3 %


def test_a_prompt_scoring_step_holds_at_most_scored_logits_bytes_of_logits(golden, monkeypatch):
    """Every row of a scored chunk keeps n_vocab float32 logits, so its chunk is cut to SCORED_LOGITS_BYTES
    (here 3 rows' worth) whatever prefill_chunk allows; the scores equal those of one uncut pass."""
    model, ref = golden
    prompt = tuple(ref["tokens"][:16].tolist())
    monkeypatch.setattr(scheduler, "SCORED_LOGITS_BYTES", 3 * 4 * model.config.n_vocab)
    rows = []
    forward = model.forward

    def counting(segments, **kw):
        out = forward(segments, **kw)
        rows.extend(len(o) for i, o in enumerate(out) if i in kw.get("every", ()))
        return out

    monkeypatch.setattr(model, "forward", counting)
    engine = Engine(model, EngineConfig(n_ctx=64, prefill_chunk=64))
    engine.add(Request(1, prompt, max_tokens=1, params=GREEDY, prompt_logprobs=0))
    scores = [s.logprob for e in run(engine) if isinstance(e, PromptLogprobsEvent) for s in e.scores]
    assert rows == [3, 3, 3, 3, 3, 1]  # 16 prompt rows in chunks of 3; the last row scores nothing
    lp = model.logits(list(prompt))[:15].astype(np.float64)  # [15, n_vocab]: one pass, no chunks
    lp -= lp.max(1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(1, keepdims=True))
    np.testing.assert_allclose(scores, lp[np.arange(15), list(prompt[1:])], rtol=1e-4, atol=1e-3)
