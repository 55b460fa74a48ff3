"""vLLM's bad_words on the engine: a banned sequence's last token is masked right after the rest of it."""

import numpy as np
import pytest

import pantheon
from pantheon.engine.bad_words import banned_next
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from tests.conftest import shared_path


def test_banned_next_follows_vllms_rule():
    words = ((7,), (1, 2), (1, 2, 3))
    assert banned_next(words, []) == [7]  # a one-token word always; a longer one needs its head generated
    assert banned_next(words, [5, 1]) == [7, 2]
    assert banned_next(words, [1, 2]) == [7, 3]
    assert banned_next(words, [2]) == [7]


@pytest.fixture(scope="module")
def model():
    return pantheon.open_model(str(shared_path("golden", "llama-q8_0.gguf")), threads=1)


def greedy(model, prompt, n, **params):
    engine = Engine(model, EngineConfig(n_ctx=64))
    engine.add(Request(1, tuple(prompt), n, SamplingParams(temperature=0.0, logit_bias={2: -100.0}, **params)))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return out


def test_a_banned_pair_turns_the_answer_at_its_second_token_to_the_next_best(model):
    prompt = [1, 300, 301, 302, 303]
    free = greedy(model, prompt, 6)
    got = greedy(model, prompt, 6, bad_words=((free[2], free[3]),))
    row = np.array(model.logits(prompt + free[:3])[-1], np.float64)  # [n_vocab] the step that made free[3]
    row[[free[3], 2]] = -np.inf  # banned by the word, and the end token by the bias
    assert got[:3] == free[:3] and got[3] == int(np.argmax(row))
    alone = greedy(model, prompt, 6, bad_words=((free[0],),))
    assert free[0] not in alone
