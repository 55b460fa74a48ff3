"""The GPU engine's logprobs: the scheduler's log_softmax over the GPU model's own logits."""

import numpy as np
import pytest

from pantheon.engine.cuda.model import open_gpu_model
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from tests.conftest import shared_path

N_PROMPT, N_NEW = 4, 2  # the simulator spends seconds per forward: a short prompt, two tokens


def test_gpu_engine_logprobs_equal_log_softmax_of_its_logits():
    path = shared_path("golden", "llama-q4_0.gguf")
    prompt = tuple(np.load(path.with_suffix(".npz"))["tokens"][:N_PROMPT].tolist())
    model = open_gpu_model(str(path), [0])
    model.allocate(16, 2)
    engine = Engine(model, EngineConfig(n_ctx=16, max_batch=1))
    engine.add(Request(1, prompt, N_NEW, SamplingParams(temperature=0.0), logprobs=3))
    events = []
    while engine.has_work:
        events += [e for e in engine.step() if isinstance(e, TokenEvent)]
    tokens = [e.token for e in events]
    rows = model.forward([(model.new_cache(), list(prompt) + tokens[:-1])], all_logits=True)[0]  # [n, vocab]
    rows = np.asarray(rows[N_PROMPT - 1:], np.float64)  # [N_NEW, vocab]
    ref = rows - rows.max(1, keepdims=True)  # [N_NEW, vocab]
    ref -= np.log(np.exp(ref).sum(1, keepdims=True))
    assert len(events) == N_NEW
    for i, e in enumerate(events):
        assert e.logprob.logprob == pytest.approx(ref[i, e.token], abs=1e-4)
        assert [t for t, _ in e.logprob.top] == np.argsort(-ref[i], kind="stable")[:3].tolist()
