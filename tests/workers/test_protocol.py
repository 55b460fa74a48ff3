"""The job codec: every field of a Job and of its SamplingParams survives encode -> decode unchanged."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipc.errors import FrameError
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.logprobs import TokenLogprob
from workers.protocol import Job, decode_job, decode_token, encode_job, encode_token

U16, U32, U64 = 2**16 - 1, 2**32 - 1, 2**64 - 1
INT32_MAX = 2**31 - 1


def f32(low=None, high=None):
    """Values the edge lets through: finite float32 numbers (the Sampling struct carries float32)."""
    return st.floats(min_value=low, max_value=high, width=32, allow_nan=False, allow_infinity=False,
                     allow_subnormal=False)


PARAMS = {
    "temperature": f32(0.0, 1e6),
    "top_k": st.integers(0, INT32_MAX),
    "top_p": f32(0.0, 1.0),
    "min_p": f32(0.0, 1.0),
    "repeat_penalty": f32(2.0**-100, 1e6),
    "repeat_last_n": st.integers(-1, INT32_MAX),
    "presence_penalty": f32(-1e6, 1e6),
    "frequency_penalty": f32(-1e6, 1e6),
    "logit_bias": st.dictionaries(st.integers(0, U32), f32(-1e6, 1e6) | st.just(float("-inf")), max_size=8),
    "seed": st.none() | st.integers(0, U64),
}

JOB = {
    "slot": st.integers(0, U16),
    "front": st.integers(0, U16),
    "prompt": st.lists(st.integers(0, U32), min_size=1, max_size=64).map(tuple),
    "max_tokens": st.integers(0, U32),
    "params": st.fixed_dictionaries(PARAMS).map(lambda kw: SamplingParams(**kw)),
    "stop_ids": st.lists(st.integers(0, U32), max_size=8).map(tuple),
    "session": st.integers(0, U64),
    "reasoning_budget": st.integers(0, U32),
    "think_ids": st.tuples(st.integers(0, U32), st.integers(0, U32)),
    "grammar": st.text(max_size=200),
    "grammar_replay": st.integers(0, U32),
    "logprobs": st.integers(-1, 20),
}


def test_the_strategies_name_every_field():
    """A field added to Job or SamplingParams without a strategy here would go untested."""
    assert set(PARAMS) == {f.name for f in dataclasses.fields(SamplingParams)}
    assert set(JOB) == {f.name for f in dataclasses.fields(Job)}


def _job(kw):
    if not kw["grammar"]:
        kw = dict(kw, grammar_replay=0)  # a replay count only means something for a grammar
    return Job(**kw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries(JOB).map(_job))
def test_job_round_trip_keeps_every_field(job):
    back = decode_job(encode_job(job))
    assert back == job
    assert dict(back.params.logit_bias) == dict(job.params.logit_bias)


def test_repeat_last_n_crosses_the_ring():
    job = Job(0, 0, (1, 2, 3), 16, SamplingParams(repeat_last_n=-1, repeat_penalty=1.3))
    assert decode_job(encode_job(job)).params.repeat_last_n == -1


def test_a_truncated_routing_record_is_a_frame_error():
    body = encode_job(Job(0, 0, (1, 2, 3), 16, SamplingParams()))
    with pytest.raises(FrameError):
        decode_job(body[:-3])


logprob = st.floats(max_value=0.0, allow_nan=False)  # -inf included: a token of probability 0
SCORED = st.builds(TokenLogprob, st.integers(0, U32), logprob,
                   st.lists(st.tuples(st.integers(0, U32), logprob), max_size=20).map(tuple))


@settings(max_examples=300, deadline=None)
@given(st.none() | SCORED)
def test_token_round_trip_keeps_its_logprobs(scored):
    token = 7 if scored is None else scored.token
    assert decode_token(encode_token(token, scored)) == (token, scored)


def test_a_token_body_cut_short_is_a_frame_error():
    body = encode_token(5, TokenLogprob(5, -0.5, ((5, -0.5), (9, -1.25))))
    for cut in (3, 5, len(body) - 1):
        with pytest.raises(FrameError):
            decode_token(body[:cut])
