"""The wire codec: every field of a generation request survives the trip, and broken bodies are refused."""

import dataclasses
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ipc.channel import DEFAULT_MAX_MESSAGE
from ipc.errors import FrameError
from pantheon.engine.infill import MAX_CANDIDATES
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.logprobs import TokenLogprob
from pantheon.errors import InvalidParameter
from pantheon.gguf.config import POOLINGS
from pantheon.serve.http.backend import Finished, GenerationRequest
from pantheon.serve.routing import prefix_key
from workers import protocol
from workers.protocol import ErrorCode, Job

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
INT32 = 2**31 - 1
F32 = np.finfo(np.float32)
UNIT = st.floats(0.0, 1.0)
# Every value SamplingParams accepts (finite, inside float32's range; a divisor is 0 or normal); the
# codec carries float64, so values between float32's steps must arrive exactly too.
REAL = st.floats(-float(F32.max), float(F32.max))
DIVISOR = st.floats(float(F32.tiny), float(F32.max))

# One strategy per SamplingParams field: a field added to the dataclass without a strategy here (and
# without a place in the codec) fails test_every_sampling_field_has_a_strategy.
SAMPLING = {
    "temperature": st.one_of(st.just(0.0), DIVISOR),
    "top_k": st.integers(0, INT32),
    "top_p": UNIT,
    "min_p": UNIT,
    "repeat_penalty": DIVISOR,
    "repeat_last_n": st.integers(-1, INT32),
    "presence_penalty": REAL,
    "frequency_penalty": REAL,
    "logit_bias": st.dictionaries(U32, st.one_of(REAL, st.just(-math.inf)), max_size=20),
    "seed": st.one_of(st.none(), U64),
    "infill": st.booleans(),
    "top_n_sigma": REAL,
    "typical_p": UNIT,
    "xtc_probability": UNIT,
    "xtc_threshold": UNIT,
    "dynatemp_range": st.floats(0.0, float(F32.max)),
    "dynatemp_exponent": st.floats(0.0, float(F32.max)),
    "mirostat": st.integers(0, 2),
    "mirostat_tau": st.floats(0.0, float(F32.max)),
    "mirostat_eta": st.floats(0.0, float(F32.max)),
    "dry_multiplier": st.floats(0.0, float(F32.max)),
    "dry_base": st.floats(0.0, float(F32.max)),
    "dry_allowed_length": st.integers(0, INT32),
    "dry_penalty_last_n": st.integers(-1, INT32),
    "dry_breakers": st.lists(st.tuples(U32, st.lists(U32, max_size=4).map(tuple)), max_size=6).map(tuple),
    "min_keep": st.integers(0, INT32),
    "min_tokens": st.integers(0, INT32),
    "allowed_ids": st.lists(U32, max_size=8).map(tuple),
    "bad_words": st.lists(st.lists(U32, min_size=1, max_size=4).map(tuple), max_size=5).map(tuple),
}

# Where each GenerationRequest field travels in a Job (the model by its slot, the session by its hash).
REQUEST_TO_JOB = {"model": "slot", "prompt": "prompt", "max_tokens": "max_tokens", "sampling": "params",
                  "stop_ids": "stop_ids", "session": "session", "reasoning_budget": "reasoning_budget",
                  "grammar": "grammar", "logprobs": "logprobs", "n": "n", "embed": "embed",
                  "prompt_logprobs": "prompt_logprobs", "post_sampling": "post_sampling", "private": "private"}

def _bounded(kw):
    """The infill sampler only with a top_k it accepts and without mirostat (SamplingParams refuses the rest)."""
    return dict(kw, infill=kw["infill"] and 0 < kw["top_k"] <= MAX_CANDIDATES and not kw["mirostat"])


jobs = st.builds(
    Job,
    slot=st.integers(0, 2**16 - 1),
    prompt=st.lists(U32, min_size=1, max_size=300).map(tuple),
    max_tokens=st.integers(0, 2**62),
    params=st.fixed_dictionaries(SAMPLING).map(lambda kw: SamplingParams(**_bounded(kw))),
    stop_ids=st.lists(U32, max_size=10).map(tuple),
    session=U64,
    reasoning_budget=st.integers(0, 2**62),
    think_ids=st.one_of(st.just(()), st.tuples(U32, U32)),
    grammar=st.text(max_size=200),
    grammar_replay=st.integers(0, 2**62),
    logprobs=st.one_of(st.none(), st.integers(0, 20)),
    n=st.integers(1, 2**16 - 1),
    embed=st.one_of(st.none(), st.sampled_from(POOLINGS)),
    prompt_logprobs=st.one_of(st.none(), st.integers(0, 20)),
    post_sampling=st.booleans(),
    private=st.booleans(),
)


def test_every_sampling_field_has_a_strategy():
    assert set(SAMPLING) == {f.name for f in dataclasses.fields(SamplingParams)}


def test_every_request_field_has_a_place_in_the_job():
    assert set(REQUEST_TO_JOB) == {f.name for f in dataclasses.fields(GenerationRequest)}
    assert set(REQUEST_TO_JOB.values()) <= {f.name for f in dataclasses.fields(Job)}


@settings(max_examples=300, deadline=None)
@given(jobs)
def test_job_round_trip_keeps_every_field(job):
    body = protocol.encode_job(job)
    back = protocol.decode_job(body)
    assert back == job
    assert protocol.read_route(body) == protocol.Route(job.slot, job.session, prefix_key(job.prompt), job.n)


@settings(max_examples=50, deadline=None)
@given(jobs, st.data())
def test_a_truncated_or_padded_job_is_refused(job, data):
    body = protocol.encode_job(job)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(FrameError):
        protocol.decode_job(body[:cut])
    with pytest.raises(FrameError):
        protocol.decode_job(body + b"\0")


def test_the_route_is_read_from_the_header_alone():
    job = Job(513, tuple(range(40)), 9, SamplingParams(repeat_last_n=7), session=2**63 + 5, n=3)
    head = protocol.encode_job(job)[:24]
    assert protocol.read_route(head) == protocol.Route(513, 2**63 + 5, prefix_key(tuple(range(32))), 3)
    with pytest.raises(FrameError):
        protocol.read_route(head[:23])


def test_repeat_last_n_survives_the_ring():
    job = Job(0, (5,), 4, SamplingParams(repeat_penalty=1.3, repeat_last_n=3))
    assert protocol.decode_job(protocol.encode_job(job)).params.repeat_last_n == 3


def test_a_value_that_does_not_fit_the_wire_is_a_typed_error():
    with pytest.raises(InvalidParameter):
        protocol.encode_job(Job(0, (2**32,), 1, SamplingParams()))
    with pytest.raises(InvalidParameter):
        protocol.encode_job(Job(2**16, (1,), 1, SamplingParams()))


def test_an_embedding_job_names_its_pooling_and_nothing_else_does():
    with pytest.raises(InvalidParameter, match="pooling"):
        protocol.encode_job(Job(0, (1,), 0, SamplingParams(), embed="max"))
    body = bytearray(protocol.encode_job(Job(0, (1,), 0, SamplingParams(), embed="last")))
    flags_at = 24 + 8 * 5 + 8 * 6 + 4 * 5  # after the int64s and doubles: think ids, counts, then flags
    assert struct.unpack_from("<I", body, flags_at)[0] >> 3 == 3  # "last" is the third pooling
    ranked = protocol.encode_job(Job(0, (1,), 0, SamplingParams(), embed="rank"))
    assert struct.unpack_from("<I", ranked, flags_at)[0] >> 3 == 4 and protocol.decode_job(ranked).embed == "rank"
    struct.pack_into("<I", body, flags_at, 7 << 3 | 1)
    with pytest.raises(FrameError, match="pooling code"):
        protocol.decode_job(bytes(body))


@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=5000), st.integers(1, 6000))
def test_embedding_pieces_round_trip(values, piece):
    pieces = protocol.embedding_pieces(np.array(values, np.float32), piece)
    assert [seq for seq, _ in pieces] == list(range(0, len(values), piece))
    got = []
    for _, body in pieces:
        total, part = protocol.decode_embedding(body)
        assert total == len(values) and len(part) <= piece
        got.extend(part)
    assert got == values


def test_the_pieces_of_a_long_prompts_vectors_each_fit_a_ring_message():
    """4,096 positions of a 4,096-wide model (64 MiB) cross as messages the rings accept (4 MiB each)."""
    pieces = protocol.embedding_pieces(np.zeros((4096, 4096), np.float32))
    assert len(pieces) == 64 and max(len(body) for _, body in pieces) < DEFAULT_MAX_MESSAGE


@pytest.mark.parametrize("body", [b"", b"\0\0\0", b"\1\0\0\0", b"\1\0\0\0" + b"\0" * 5,
                                  b"\1\0\0\0" + b"\0" * 8])
def test_a_broken_embedding_body_is_refused(body):
    with pytest.raises(FrameError, match="EMBEDDING"):
        protocol.decode_embedding(body)


def test_bad_sampling_values_on_the_wire_are_refused_by_the_parameter_checks():
    body = bytearray(protocol.encode_job(Job(0, (1,), 1, SamplingParams(top_p=0.5))))
    struct.pack_into("<d", body, 24 + 8 * 5 + 8, 2.0)  # top_p, after four int64, the seed and temperature
    with pytest.raises(InvalidParameter, match="top_p"):
        protocol.decode_job(bytes(body))


@given(st.sampled_from(list(ErrorCode)), st.floats(0, 1e6), st.text(max_size=100))
def test_error_body_round_trip(code, retry_after, detail):
    err = protocol.decode_error(protocol.encode_error(code, detail, retry_after))
    assert (err.code, err.retry_after, err.detail) == (code, retry_after, detail)


def test_error_body_checks():
    with pytest.raises(FrameError):
        protocol.decode_error(protocol.encode_error(ErrorCode.OVERLOADED, "abc")[:-1])
    with pytest.raises(FrameError, match="code 99"):
        protocol.decode_error(struct.pack("<HxxdI", 99, 0.0, 0))
    long = protocol.decode_error(protocol.encode_error(ErrorCode.BAD_REQUEST, "x" * 10_000))
    assert len(long.detail) == protocol.MAX_DETAIL


def test_done_accepted_and_slot_bodies():
    assert protocol.decode_done(protocol.encode_done("length", 10, 4, 20)) == (Finished("length", 10, 4, 20), True)
    assert protocol.decode_done(protocol.encode_done("stop", 10, 4, 2, choice=3, final=False)) == (
        Finished("stop", 10, 4, 2, choice=3), False)
    assert protocol.decode_done(protocol.encode_done("stop", 10, 0, 2, stop_token=151645)) == (
        Finished("stop", 10, 0, 2, stop_token=151645), True)
    good = protocol.encode_done("stop", 1, 0, 1)
    with pytest.raises(FrameError, match="reason 7"):
        protocol.decode_done(b"\x07" + good[1:])
    with pytest.raises(FrameError, match="stop token -2"):
        protocol.decode_done(good[:-4] + struct.pack("<i", -2))
    with pytest.raises(FrameError):
        protocol.decode_done(protocol.encode_done("stop", 1, 0, 1)[:-1])
    assert protocol.decode_accepted(protocol.encode_accepted(protocol.QUEUED)) == protocol.QUEUED
    assert protocol.decode_slot(protocol.encode_slot(3, "failed: no")) == (3, "failed: no")
    assert protocol.decode_slot(protocol.encode_slot(3)) == (3, "")
    with pytest.raises(FrameError):
        protocol.decode_slot(b"\x01")


def test_kinds_have_distinct_values_that_fit_a_frame():
    values = [int(k) for k in protocol.Kind]
    assert len(set(values)) == len(values) and all(1 <= v <= 255 for v in values)


def test_continuation_extends_the_prompt_by_what_was_sent():
    job = Job(1, (1, 2), 10, SamplingParams())
    again = protocol.continuation(job, [7, 8, 9])
    assert (again.prompt, again.max_tokens, again.params, again.grammar_replay) == ((1, 2, 7, 8, 9), 7, job.params, 3)


def test_one_choice_is_a_job_of_its_own_with_the_seed_the_engine_gives_that_choice():
    job = Job(1, (1, 2), 10, SamplingParams(seed=2**64 - 1, top_k=3), n=4)
    for c in range(4):
        alone = protocol.one_choice(job, c)
        assert (alone.n, alone.prompt, alone.max_tokens) == (1, job.prompt, 10)
        assert alone.params.seed == (2**64 - 1 + c) % 2**64 and alone.params.top_k == 3
    unseeded = Job(1, (1,), 5, SamplingParams(), n=2)
    assert protocol.one_choice(unseeded, 1).params.seed is None


logprob = st.floats(max_value=0.0, allow_nan=False)  # -inf included: a token of probability 0
SCORED = st.builds(TokenLogprob, U32, logprob, st.lists(st.tuples(U32, logprob), max_size=20).map(tuple))


@settings(max_examples=300, deadline=None)
@given(st.none() | SCORED, st.integers(0, 2**16 - 1), U32)
def test_token_round_trip_keeps_its_logprobs_choice_and_cache_count(scored, choice, cached):
    token = 7 if scored is None else scored.token
    body = protocol.encode_token(token, scored, choice, cached)
    assert protocol.decode_token(body) == (token, scored, choice, cached)


PROMPT_SCORED = st.builds(TokenLogprob, U32, logprob, st.lists(st.tuples(U32, logprob), max_size=20).map(tuple),
                          U32)  # a prompt token's score carries its rank


@settings(max_examples=100, deadline=None)
@given(st.lists(PROMPT_SCORED, min_size=1, max_size=30))
def test_prompt_scores_round_trip(scores):
    assert protocol.decode_prompt_scores(protocol.encode_prompt_scores(scores)) == tuple(scores)


def test_a_broken_prompt_scores_body_is_refused():
    body = protocol.encode_prompt_scores([TokenLogprob(5, -0.5, ((5, -0.5), (9, -1.25)))])
    for cut in (0, 3, 15, len(body) - 1):
        with pytest.raises(FrameError, match="PROMPT_LOGPROBS"):
            protocol.decode_prompt_scores(body[:cut])


def test_cancel_names_the_whole_request_or_one_choice():
    assert protocol.decode_cancel(protocol.encode_cancel()) is None
    assert protocol.decode_cancel(protocol.encode_cancel(2)) == 2
    with pytest.raises(FrameError):
        protocol.decode_cancel(b"\x01\x00\x00")


def test_a_token_body_cut_short_is_a_frame_error():
    body = protocol.encode_token(5, TokenLogprob(5, -0.5, ((5, -0.5), (9, -1.25))))
    for cut in (3, 5, 7, 9, 11, len(body) - 1):
        with pytest.raises(FrameError):
            protocol.decode_token(body[:cut])


def test_the_infill_sampler_and_a_prompt_only_job_cross_the_wire():
    job = Job(0, (1, 2, 3), 0, SamplingParams(top_k=40, top_p=0.9, infill=True), (2,))
    back = protocol.decode_job(protocol.encode_job(job))
    assert back == job and back.params.infill and back.max_tokens == 0
    assert not protocol.decode_job(protocol.encode_job(dataclasses.replace(job, params=SamplingParams()))).params.infill
