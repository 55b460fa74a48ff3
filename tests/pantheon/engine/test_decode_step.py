"""The decode fast path: the general path's logits to the bit, taken only where it serves."""

import threading

import numpy as np
import pytest

from pantheon.demo import demo_model_path
from pantheon.engine import decode_step
from pantheon.engine.kernels.vnni import has_int8_dots
from pantheon.engine.model import open_model
from tests.conftest import shared_path

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="the repacked kernels need AVX512-VNNI or AVX2")

PROMPT = [1, 5, 9, 200, 17, 3, 44, 2]
STEPS = [7, 300, 12, 5, 99, 61]


def _path(name):
    return str(demo_model_path()) if name == "demo" else str(shared_path("golden", f"{name}.gguf"))


def _decode(model, fast):
    """Logits of PROMPT, then of each of STEPS fed one at a time, with the fast path on or off."""
    saved, model.decode_step = model.decode_step, (model.decode_step if fast else None)
    try:
        cache = model.new_cache(64)
        out = [model.forward([(cache, PROMPT)])[0]]
        for t in STEPS:
            out.append(model.forward([(cache, [t])])[0])
        return out
    finally:
        model.decode_step = saved


@pytest.mark.parametrize("name", ["demo", "llama-q4_k_m", "llama-q6_k", "llama-q4_0", "llama-tied-q8_0"])
def test_fast_path_logits_equal_the_general_path(name, monkeypatch):
    model = open_model(_path(name), threads=2)
    assert model.decode_step is not None
    taken = []
    step = decode_step.DecodeStep.step
    monkeypatch.setattr(decode_step.DecodeStep, "step", lambda self, *a: taken.append(1) or step(self, *a))
    fast = _decode(model, True)
    assert len(taken) == len(STEPS)  # every one-token step went the fast way, the prompt did not
    general = _decode(model, False)
    for a, b in zip(fast, general):
        np.testing.assert_array_equal(a, b)


def _decode_batch(model, fast, streams=3):
    """Logits of `streams` sequences (prompts of different lengths) stepping together through STEPS."""
    saved, model.decode_step = model.decode_step, (model.decode_step if fast else None)
    try:
        caches = [model.new_cache(64) for _ in range(streams)]
        for i, c in enumerate(caches):
            model.forward([(c, PROMPT[:3 + i])])
        out = []
        for t in STEPS[:4]:
            out.extend(model.forward([(c, [t + i]) for i, c in enumerate(caches)]))
        return out
    finally:
        model.decode_step = saved


@pytest.mark.parametrize("name", ["demo", "llama-q4_k_m"])
def test_batched_decode_steps_equal_the_general_path(name, monkeypatch):
    """Several sequences' one-token steps together (a batch of decode streams) take the fast path with
    the general path's bits; each row's logits are its own, shaped [1, n_vocab]."""
    model = open_model(_path(name), threads=2)
    rows = []
    step = decode_step.DecodeStep.step
    spy = lambda self, caches, tokens, beat=None: rows.append(len(tokens)) or step(self, caches, tokens, beat)  # noqa: E731
    monkeypatch.setattr(decode_step.DecodeStep, "step", spy)
    fast = _decode_batch(model, True)
    assert rows == [3] * 4
    general = _decode_batch(model, False)
    assert len(fast) == 12 and all(f.shape == (1, model.config.n_vocab) for f in fast)
    for a, b in zip(fast, general):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(fast[0], fast[1])  # distinct sequences, distinct logits


@pytest.mark.parametrize("name", ["qwen2-q8_0", "qwen3-q8_0", "phi3-q8_0", "mixtral-q8_0"])
def test_layouts_it_does_not_serve_take_the_general_path(name):
    """Biases (qwen2), q/k norms (qwen3), fused qkv (phi3) and experts (mixtral)."""
    assert open_model(_path(name), threads=2).decode_step is None


def test_unrepacked_weights_take_the_general_path():
    assert open_model(_path("demo"), threads=2, repack=False).decode_step is None


def test_a_step_while_another_holds_the_buffers_takes_the_general_path():
    model = open_model(_path("demo"), threads=2)
    general = _decode(model, False)
    with model.decode_step.busy:  # as if another thread's step were running
        held = _decode(model, True)
    for a, b in zip(held, general):
        np.testing.assert_array_equal(a, b)
    assert model.decode_step.busy.acquire(blocking=False)  # released after each fallback as before
    model.decode_step.busy.release()


def test_logits_are_new_arrays_each_step():
    """The fast path keeps its buffers; a step's logits must not change under the caller after the next."""
    model = open_model(_path("demo"), threads=2)
    cache = model.new_cache(32)
    model.forward([(cache, PROMPT)])
    first = model.forward([(cache, [7])])[0]
    kept = first.copy()
    model.forward([(cache, [9])])
    np.testing.assert_array_equal(first, kept)


def test_threads_share_a_model_safely():
    """Two threads decoding on one model at once: each gets its own sequence's logits."""
    model = open_model(_path("demo"), threads=1)
    want = _decode(model, False)
    got, errors = [None, None], []

    def run(i):
        try:
            got[i] = _decode(model, True)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for seq in got:
        for a, b in zip(seq, want):
            np.testing.assert_array_equal(a, b)


def test_kept_buffers_are_one_rows_and_the_last_batch_sizes():
    """A server's batch size moves: the path keeps one row's arrays and the latest other size's only."""
    model = open_model(_path("demo"), threads=2)
    caches = [model.new_cache(32) for _ in range(4)]
    for c in caches:
        model.forward([(c, PROMPT[:4])])
    for n in (1, 3, 2, 4):
        model.forward([(c, [5]) for c in caches[:n]])
    assert sorted(model.decode_step.buffers) == [1, 4]
