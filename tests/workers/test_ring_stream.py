"""A request's stream over the rings, driven frame by frame: resubmission after a worker death, per choice."""

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from pantheon.engine.sampler import SamplingParams
from pantheon.serve.http.backend import Embedding, Finished, GenerationFailed, JobTooLarge, Tokens
from workers import protocol
from workers.protocol import ErrorCode, Job, Kind
from workers.ring_stream import RingStream


@dataclass
class Msg:
    kind: int
    request_id: int
    seq: int
    payload: bytes


class FakeBackend:
    """What a RingStream asks of the front's backend, recording what it sends."""

    class layout:
        n_dies = 0

    max_job = 4096

    def __init__(self):
        self.ids, self.live, self.sent = itertools.count(100), set(), []

    def new_id(self):
        return next(self.ids)

    def register(self, rid, stream):
        self.live.add(rid)

    def forget(self, rid):
        self.live.discard(rid)

    def send(self, kind, rid, payload):
        self.sent.append((kind, rid, payload))

    def submits(self):
        return [(rid, protocol.decode_job(p)) for k, rid, p in self.sent if k == Kind.SUBMIT]


PROMPT = (1, 2, 3)


def opened(n=2, seed=7, max_tokens=5):
    backend = FakeBackend()
    stream = RingStream(backend, Job(0, PROMPT, max_tokens, SamplingParams(seed=seed), n=n))
    rid = stream.submit()
    stream.events.put(Msg(Kind.ACCEPTED, rid, 0, protocol.encode_accepted(0)))
    stream.wait_accepted()
    return backend, stream, rid, iter(stream)


def token(stream, rid, seq, tok, choice=0):
    stream.events.put(Msg(Kind.TOKENS, rid, seq, protocol.encode_token(tok, None, choice)))


def died(stream, rid):
    stream.events.put(Msg(Kind.ERROR, rid, 0, protocol.encode_error(ErrorCode.WORKER_DIED, "killed")))


def done(stream, rid, choice=0, final=True, n=1, reason="length"):
    stream.events.put(Msg(Kind.DONE, rid, 0, protocol.encode_done(reason, 3, 0, n, choice=choice, final=final)))


def test_started_choices_continue_one_by_one_with_their_own_seeds_and_tokens():
    backend, stream, rid, events = opened()
    a, b = rid + 1, rid + 2  # the ids the two continuations will get (frames are queued before they are read)
    token(stream, rid, 0, 40, choice=0)
    token(stream, rid, 0, 50, choice=1)
    token(stream, rid, 1, 41, choice=0)
    died(stream, rid)
    token(stream, rid, 2, 99, choice=0)  # a late frame of the dead attempt is dropped
    token(stream, b, 0, 51)  # each continuation is choice 0 of its own job, numbered after what was sent
    token(stream, a, 0, 42)
    done(stream, a, n=3)
    done(stream, b, n=2)
    assert list(events) == [Tokens((40,), 0, (), 0), Tokens((50,), 0, (), 1), Tokens((41,), 1, (), 0),
                            Tokens((51,), 1, (), 1), Tokens((42,), 2, (), 0),
                            Finished("length", 3, 0, 3, 0), Finished("length", 3, 0, 2, 1)]
    (ra, job_a), (rb, job_b) = backend.submits()[1:]
    assert (ra, job_a.prompt, job_a.n, job_a.max_tokens, job_a.params.seed, job_a.grammar_replay) == (
        a, PROMPT + (40, 41), 1, 3, 7, 2)
    assert (rb, job_b.prompt, job_b.n, job_b.max_tokens, job_b.params.seed, job_b.grammar_replay) == (
        b, PROMPT + (50,), 1, 4, 8, 1)
    assert backend.live == set()


def test_choices_that_sent_nothing_yet_are_resubmitted_together():
    backend, stream, rid, events = opened(n=3)
    died(stream, rid)
    token(stream, rid + 1, 0, 60, choice=2)
    assert next(events) == Tokens((60,), 0, (), 2)
    [(again, job)] = backend.submits()[1:]
    assert again == rid + 1 and job.n == 3 and job.prompt == PROMPT and job.params.seed == 7


def test_a_choice_that_ended_is_not_continued_and_one_cancelled_alone_is_ended():
    backend, stream, rid, events = opened(n=3)
    token(stream, rid, 0, 40, choice=0)
    done(stream, rid, choice=1, final=False, n=0, reason="stop")
    assert next(events) == Tokens((40,), 0, (), 0)
    assert next(events) == Finished("stop", 3, 0, 0, 1)
    stream.cancel(2)
    assert backend.sent[-1] == (Kind.CANCEL, rid, protocol.encode_cancel(2))
    died(stream, rid)
    token(stream, rid + 1, 0, 41)
    assert next(events) == Finished("abort", 3, 0, 0, 2)  # cancelled before the death: ended, not resumed
    [(cont, job)] = backend.submits()[1:]
    assert cont == rid + 1 and job.prompt == PROMPT + (40,) and job.n == 1
    assert next(events) == Tokens((41,), 1, (), 0)
    stream.cancel(0)
    assert backend.sent[-1] == (Kind.CANCEL, cont, b"")  # alone in its attempt: the whole attempt stops
    done(stream, cont, reason="abort", n=2)
    assert list(events) == [Finished("abort", 3, 0, 2, 0)]


def test_a_second_death_of_a_continued_choice_ends_the_stream_poison_pill():
    backend, stream, rid, events = opened(n=2)
    token(stream, rid, 0, 40, choice=0)
    token(stream, rid, 0, 50, choice=1)
    died(stream, rid)
    died(stream, rid + 1)
    assert len([next(events) for _ in range(2)]) == 2
    with pytest.raises(GenerationFailed, match="poison-pill"):
        next(events)
    assert len(backend.submits()) == 3 and backend.live == set()


def test_one_choice_continues_as_before():
    backend, stream, rid, events = opened(n=1, seed=None)
    token(stream, rid, 0, 40)
    died(stream, rid)
    token(stream, rid + 1, 0, 41)
    done(stream, rid + 1, n=2)
    assert list(events) == [Tokens((40,), 0, (), 0), Tokens((41,), 1, (), 0), Finished("length", 3, 0, 2, 0)]
    [(cont, job)] = backend.submits()[1:]
    assert job.prompt == PROMPT + (40,) and job.params.seed is None and job.max_tokens == 4


def embedding_job():
    backend = FakeBackend()
    stream = RingStream(backend, Job(0, PROMPT, 0, SamplingParams(), embed="last"))
    rid = stream.submit()
    stream.events.put(Msg(Kind.ACCEPTED, rid, 0, protocol.encode_accepted(0)))
    stream.wait_accepted()
    return backend, stream, rid, iter(stream)


def embedding(stream, rid, values, piece=protocol.EMBEDDING_PIECE):
    for seq, body in protocol.embedding_pieces(values, piece):
        stream.events.put(Msg(Kind.EMBEDDING, rid, seq, body))


def assert_vector_then(events, values, finished):
    """`events` are one Embedding of float32 `values`, then `finished`."""
    got = list(events)
    assert [type(e) for e in got] == [Embedding, Finished] and got[1] == finished
    assert got[0].vector.dtype == np.float32
    np.testing.assert_array_equal(got[0].vector, np.array(values, np.float32))


def test_an_embedding_whose_worker_died_is_asked_again_and_arrives_once():
    """max_tokens 0 must not read as "everything was delivered": the vector had not come yet."""
    backend, stream, rid, events = embedding_job()
    died(stream, rid)
    embedding(stream, rid + 1, [0.5, -2.0])
    embedding(stream, rid + 1, [9.0, 9.0])  # never twice
    done(stream, rid + 1, n=0, reason="stop")
    assert_vector_then(events, [0.5, -2.0], Finished("stop", 3, 0, 0, 0))
    [(again, job)] = backend.submits()[1:]
    assert again == rid + 1 and job.embed == "last" and job.prompt == PROMPT and job.max_tokens == 0


def test_a_death_after_the_embedding_arrived_loses_nothing():
    backend, stream, rid, events = embedding_job()
    embedding(stream, rid, [1.0])
    died(stream, rid)
    assert_vector_then(events, [1.0], Finished("length", 3, 0, 0, 0))
    assert len(backend.submits()) == 1


def test_an_embedding_in_pieces_arrives_whole_and_once_across_a_death():
    """Pooling none's vectors come in several messages; a die that dies between them is asked again, and
    the pieces it sends again from the first are not appended twice."""
    backend, stream, rid, events = embedding_job()
    values = [float(i) for i in range(10)]
    first = protocol.embedding_pieces(values, 4)[0]
    stream.events.put(Msg(Kind.EMBEDDING, rid, *first))
    died(stream, rid)
    embedding(stream, rid + 1, values, 4)
    done(stream, rid + 1, n=0, reason="stop")
    assert_vector_then(events, values, Finished("stop", 3, 0, 0, 0))
    assert len(backend.submits()) == 2


def test_tokens_carry_the_prompt_and_cache_counts_the_die_reported():
    """What per-token timings show before the DONE; a continuation's larger cache hit is cut to the prompt."""
    backend, stream, rid, events = opened(n=1)
    stream.events.put(Msg(Kind.TOKENS, rid, 0, protocol.encode_token(40, None, 0, 2)))
    first = next(events)
    assert (first.prompt_tokens, first.cached_tokens) == (3, 2)
    died(stream, rid)
    stream.events.put(Msg(Kind.TOKENS, rid + 1, 0, protocol.encode_token(41, None, 0, 4)))  # prompt + sent, cached
    again = next(events)
    assert again.ids == (41,) and (again.prompt_tokens, again.cached_tokens) == (3, 3)


def test_prompt_logprobs_of_a_job_resubmitted_whole_are_not_delivered_twice():
    from pantheon.engine.logprobs import TokenLogprob
    from pantheon.serve.http.backend import PromptLogprobs

    backend = FakeBackend()
    stream = RingStream(backend, Job(0, PROMPT, 2, SamplingParams(), prompt_logprobs=0))
    rid = stream.submit()
    stream.events.put(Msg(Kind.ACCEPTED, rid, 0, protocol.encode_accepted(0)))
    stream.wait_accepted()
    events = iter(stream)
    two, three = TokenLogprob(2, -1.0, ()), TokenLogprob(3, -2.0, ())
    stream.events.put(Msg(Kind.PROMPT_LOGPROBS, rid, 1, protocol.encode_prompt_scores([two])))
    died(stream, rid)
    stream.events.put(Msg(Kind.PROMPT_LOGPROBS, rid + 1, 1, protocol.encode_prompt_scores([two, three])))
    token(stream, rid + 1, 0, 40)
    done(stream, rid + 1, n=1)
    assert list(events) == [PromptLogprobs(1, (two,)), PromptLogprobs(2, (three,)), Tokens((40,), 0, (), 0),
                            Finished("length", 3, 0, 1, 0)]
    assert [job.prompt_logprobs for _, job in backend.submits()] == [0, 0]
    # after a token, a continuation does not ask again: the prompt's logprobs came before that token
    assert protocol.continuation(stream.job, [40]).prompt_logprobs is None


def test_a_job_larger_than_a_ring_message_is_refused_before_anything_is_sent():
    backend = FakeBackend()
    stream = RingStream(backend, Job(0, PROMPT, 4, SamplingParams(), grammar="x" * 5000))
    with pytest.raises(JobTooLarge, match="grammar") as err:
        stream.submit()
    assert err.value.status == 413 and backend.sent == [] and backend.live == set()
