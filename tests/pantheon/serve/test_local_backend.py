"""LocalBackend: the engine's own tokens through a thread and a queue; admission, cancel, close."""

import dataclasses
import threading

import numpy as np
import pytest

import pantheon
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.serve.http.backend import (ContextOverBudget, Embedding, Finished, GenerationFailed, GenerationRequest,
                                         Overloaded, PromptLogprobs, Tokens, UnknownModel, Unavailable)
from pantheon.serve.local_backend import LocalBackend
from pantheon.engine.sampler import SamplingParams
from tests.conftest import shared_path

GREEDY = SamplingParams(temperature=0.0)
CONFIG = EngineConfig(n_ctx=128, max_batch=2)


def open_model(name):
    return pantheon.open_model(str(shared_path("golden", name)), threads=1)


@pytest.fixture
def backend():
    b = LocalBackend({"qwen2": open_model("qwen2-q8_0.gguf"), "llama": open_model("llama-q8_0.gguf")},
                     CONFIG, max_concurrent=1, max_queue=1)
    yield b
    b.close()


def request(model="qwen2", prompt=(1, 500, 600, 700), max_tokens=6, session=None):
    return GenerationRequest(model, tuple(prompt), max_tokens, GREEDY, frozenset(), session)


def drain(stream):
    ids, end = [], None
    for event in stream:
        if isinstance(event, Tokens):
            assert event.seq == len(ids)
            ids += event.ids
        else:
            assert isinstance(event, Finished) and end is None
            end = event
    return ids, end


def test_tokens_equal_the_engine_run_directly(backend):
    engine = Engine(open_model("qwen2-q8_0.gguf"), CONFIG)
    engine.add(Request(1, (1, 500, 600, 700), 6, GREEDY))
    want = []
    while engine.has_work:
        want += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    ids, end = drain(backend.generate(request()))
    assert ids == want and (end.reason, end.prompt_tokens, end.completion_tokens) == ("length", 4, 6)


def test_routing_and_up_front_refusals(backend):
    with pytest.raises(UnknownModel):
        backend.served("mistral")
    assert backend.served("llama").name == "llama" and backend.served("llama").n_ctx == 128
    with pytest.raises(ContextOverBudget):
        backend.generate(request(prompt=range(1, 129)))


def test_full_queue_is_overloaded_and_cancel_frees_places(backend):
    running = backend.generate(request(max_tokens=120))
    waiting = backend.generate(request(max_tokens=120))
    with pytest.raises(Overloaded) as refused:
        backend.generate(request())
    assert refused.value.retry_after == 2  # nothing measured yet: ceil((1 + 1) * 1 s / 1)
    waiting.cancel()
    assert drain(waiting) == ([], Finished("abort", 4, 0, 0))
    running.cancel()
    ids, end = drain(running)
    assert end.reason == "abort" and len(ids) < 120
    stats = backend.stats()["qwen2"]
    assert (stats["aborted"], stats["running"], stats["queued"]) == (2, 0, 0)
    assert drain(backend.generate(request(max_tokens=2)))[1].reason == "length"
    assert backend.stats()["qwen2"]["mean_service_s"] > 0


def test_session_reuses_the_cache(backend):
    drain(backend.generate(request(session="s")))
    assert drain(backend.generate(request(prompt=(1, 500, 600, 700, 9), session="s")))[1].cached_tokens == 4


def test_close_fails_new_work_and_health_says_so(backend):
    assert backend.health()[0]
    backend.close()
    with pytest.raises(Unavailable):
        backend.generate(request())
    serving, body = backend.health()
    assert not serving and body["models"]["qwen2"]["state"] == "unloading"


def test_a_crashed_engine_fails_its_requests_and_reports_failed():
    model = open_model("qwen2-q8_0.gguf")

    def broken_forward(segments, all_logits=False):
        raise RuntimeError("device lost")

    model.forward = broken_forward
    backend = LocalBackend({"qwen2": model}, CONFIG)
    try:
        with pytest.raises(GenerationFailed, match="device lost"):
            drain(backend.generate(request()))
        assert backend.health() == (False, {"status": "unavailable", "dies": {}, "models": {"qwen2": {
            "state": "failed", "replicas": 1, "n_ctx": 128, "reason": "engine of qwen2 failed: device lost"}}})
        with pytest.raises(Unavailable):
            backend.generate(request())
    finally:
        backend.close()


def test_a_stream_resumed_after_its_consumer_stopped_still_ends():
    """A consumer that stops right after a Tokens and iterates again gets the Finished queued behind it."""
    from pantheon.serve.http.backend import Finished, Tokens
    from pantheon.engine.scheduler import Request
    from pantheon.serve.local_backend import LocalStream

    stream = LocalStream(runner=None, engine_request=Request(1, (1, 2, 3)))
    for item in (Tokens((5,), 0), Tokens((6,), 1), Finished("length", 3, 0, 2)):
        stream.events.put(item)
    first = next(iter(stream))
    assert first == Tokens((5, 6), 0)
    rest = []
    reader = threading.Thread(target=lambda: rest.extend(stream), daemon=True)
    reader.start()
    reader.join(5)
    assert rest == [Finished("length", 3, 0, 2)], "the Finished behind the last tokens was lost"


def test_the_reasoning_budget_reaches_the_engine(backend):
    """The engine request carries the request's reasoning budget and the model's think tags (the engine's
    own tests show what it does with them: tests/pantheon/engine/test_scheduler.py)."""
    import dataclasses

    stream = backend.generate(dataclasses.replace(request(), reasoning_budget=3))
    drain(stream)
    assert stream.request.reasoning_budget == 3
    assert stream.request.think_ids == backend.served("qwen2").think_ids
    assert stream.request.params == GREEDY and stream.request.prompt == (1, 500, 600, 700)


def test_a_vector_or_prompt_logprobs_do_not_end_a_local_stream(backend):
    """Only a choice's Finished counts toward a stream's end."""
    events = list(backend.generate(GenerationRequest("qwen2", (1, 2, 3), 0, GREEDY, frozenset(), embed="last")))
    assert [type(e) for e in events] == [Embedding, Finished] and events[1].reason == "stop"
    assert np.isfinite(events[0].vector).all()
    events = list(backend.generate(dataclasses.replace(request(max_tokens=2), prompt_logprobs=1)))
    assert isinstance(events[0], PromptLogprobs) and isinstance(events[-1], Finished)
    assert all(isinstance(e, Tokens) for e in events[1:-1]) and sum(len(e.ids) for e in events[1:-1]) == 2
    assert events[0].start == 1 and [s.token for s in events[0].scores] == [500, 600, 700]
