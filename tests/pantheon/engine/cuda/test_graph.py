"""Captured decode steps (graph.py): a replay computes what launching every kernel again computes."""

import numpy as np
import pytest

from pantheon.engine.cuda.backend import open_backend
from pantheon.engine.cuda.model import open_gpu_model
from tests.pantheon.engine.cuda.sim import need_devices
from tests.pantheon.hf.tinyhf import make_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-graph")
    return {mt: str(make_gguf(root / f"{mt}.gguf", mt)) for mt in ("llama", "qwen3_moe")}


def _steps(model):
    """Logits of a prefill of two sequences, then decode steps of both, of one, and of both in swapped order."""
    model.allocate(16, 2)
    a, b = model.new_cache(), model.new_cache()
    out = model.forward([(a, [1, 2, 3]), (b, [4, 5])])
    for s in range(3):
        out += model.forward([(a, [6 + s]), (b, [9 + s])])
    out += model.forward([(b, [12])])
    out += model.forward([(b, [13]), (a, [14])])  # slots and positions change places: read from arrays
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe"])
def test_replayed_decode_steps_equal_eager_steps(tiny, arch):
    eager = open_gpu_model(tiny[arch], [0])
    eager.graphs = False
    want = _steps(eager)
    assert eager.plans == {}
    replayed = open_gpu_model(tiny[arch], [0])
    got = _steps(replayed)
    assert replayed.plans[2].replays == 3 and replayed.plans[1].replays == 0
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_replay_launches_nothing_from_python(tiny):
    model = open_gpu_model(tiny["llama"], [0])
    model.allocate(8, 1)
    cache = model.new_cache()
    model.forward([(cache, [1, 2])])
    backend = model.stages[0].backend
    first = backend.launches
    model.forward([(cache, [3])])  # eager, then captured
    second = backend.launches
    model.forward([(cache, [4])])
    assert second - first >= 2 * 15 and backend.launches == second  # two layers of kernels, then none


def test_a_step_split_over_two_devices_replays_like_one_device(tiny):
    need_devices(2)
    one, two = open_gpu_model(tiny["llama"], [0]), open_gpu_model(tiny["llama"], [0, 1])
    assert len(two.stages) == 2
    for g, w in zip(_steps(two), _steps(one)):
        np.testing.assert_array_equal(g, w)
    assert all(part.replay is not None for part in two.plans[2].parts)


def test_a_capture_refuses_anything_but_launches():
    b = open_backend(0)
    with pytest.raises(AssertionError, match="may only launch"):
        b.capture(lambda: b.empty((2,)))
    assert b.empty((2,)).shape == (2,)  # the refused capture left the backend usable
    x, one = b.zeros((1, 4)), b.upload(np.ones((1, 4), np.float32))  # [1, 4] each
    replay = b.capture(lambda: b.launch(_add_kernel(), 1, 1)(x, one))
    assert not b.to_host(x).any()  # captured, not run
    replay()
    replay()
    np.testing.assert_array_equal(b.to_host(x), np.full((1, 4), 2, np.float32))


def _add_kernel():
    from pantheon.engine.cuda import layers

    return layers.add


def test_a_device_that_refuses_capture_runs_its_steps_eagerly(tiny, monkeypatch, caplog):
    """A driver without stream capture (the device's error, not ours) costs speed, never a result."""
    want = _steps(open_gpu_model(tiny["llama"], [0]))
    model = open_gpu_model(tiny["llama"], [0])

    def refuse(body):
        raise RuntimeError("cudaErrorStreamCaptureUnsupported")

    monkeypatch.setattr(model.stages[0].backend, "capture", refuse)
    for g, w in zip(_steps(model), want):
        np.testing.assert_array_equal(g, w)
    assert model.plans[2].replays == 0 and "StreamCaptureUnsupported" in model.plans[2].capture_error
    assert sum("run uncaptured" in r.message for r in caplog.records) == 2  # once per batch size, not per step
