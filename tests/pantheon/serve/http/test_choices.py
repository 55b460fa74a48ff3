"""n > 1 over HTTP (in-process backend): choices from one prompt prefill, each reproducible by its seed."""

import numpy as np
import pytest

from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from tests.pantheon.serve.http.server import Served, call, open_models
from tests.pantheon.serve.http.test_logprobs import log_softmax_rows
from tests.pantheon.serve.http.test_errors import error_of

PROMPT = [1, 500, 600, 700]
# the golden models put nearly all probability on one token: only a very high temperature spreads choices
HOT = dict(temperature=100.0, top_k=0, top_p=1.0, min_p=0.0, seed=11, logit_bias={"2": -100})


class CountingModel:
    """A Model that records the token count of every sequence of every forward (prefill shows as > 1)."""

    def __init__(self, model):
        self._model, self.fed = model, []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def forward(self, batch, hidden=()):
        self.fed.append([len(tokens) for _, tokens in batch])
        return self._model.forward(batch, hidden=hidden)


@pytest.fixture(scope="module")
def counted():
    models = open_models(("qwen2",))
    spy = CountingModel(models["qwen2"])
    server = Served({"qwen2": spy})
    yield server, spy
    server.close()


def alone(model, seed, n_tokens):
    """What one choice with `seed` gives by itself, from an in-process engine (the reference)."""
    engine = Engine(model, EngineConfig(n_ctx=64))
    params = SamplingParams(temperature=100.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, logit_bias={2: -100.0})
    engine.add(Request(1, tuple(PROMPT), n_tokens, params))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return out


def test_n_choices_are_each_seeds_own_and_share_one_prompt_prefill(counted, reference):
    server, spy = counted
    spy.fed.clear()
    status, _, body = call(server.port, "POST", "/v1/completions",
                           dict(HOT, model="qwen2", prompt=PROMPT, max_tokens=6, n=3, logprobs=0))
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    prefills = [n for step in spy.fed for n in step if n > 1]
    assert prefills == [len(PROMPT)]  # one prompt prefill for three choices
    got = [c["logprobs"]["tokens"] for c in body["choices"]]
    assert len({tuple(g) for g in got}) == 3
    spell = reference["qwen2"].tokenizer
    for i, choice in enumerate(body["choices"]):  # choice i is what seed + i gives alone
        want = alone(reference["qwen2"], HOT["seed"] + i, 6)
        assert choice["text"] == spell.decode(want)
        assert choice["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == len(PROMPT)  # the shared prompt counts once
    assert body["usage"]["completion_tokens"] == 18


def test_best_of_answers_the_candidates_of_highest_logprob_per_token(served, reference):
    """Candidate k is what seed + k gives alone; the n answered are those whose tokens have the highest
    mean log_softmax under the reference model (teacher-forced), best first."""
    status, _, body = call(served.port, "POST", "/v1/completions",
                           dict(HOT, model="qwen2", prompt=PROMPT, max_tokens=6, n=2, best_of=4))
    assert status == 200, body
    model = reference["qwen2"]
    candidates = [alone(model, HOT["seed"] + k, 6) for k in range(4)]
    means = [log_softmax_rows(model, PROMPT, c)[np.arange(len(c)), c].mean() for c in candidates]
    assert len(set(np.round(means, 4))) == 4  # distinct, so the ranking is decided
    order = sorted(range(4), key=lambda k: -means[k])
    texts = [model.tokenizer.decode(candidates[k]) for k in order[:2]]
    assert [(c["index"], c["text"], c["logprobs"]) for c in body["choices"]] == [(0, texts[0], None),
                                                                                 (1, texts[1], None)]
    assert body["usage"]["completion_tokens"] == 24  # every candidate's tokens are billed, as OpenAI's


def test_best_of_ranks_each_prompts_candidates_apart(served):
    status, _, body = call(served.port, "POST", "/v1/completions",
                           dict(HOT, model="qwen2", prompt=[PROMPT, PROMPT[:3]], max_tokens=3, best_of=2,
                                logprobs=1))
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(len(c["logprobs"]["tokens"]) == 3 for c in body["choices"])  # asked for: shown


def test_streamed_choices_match_the_non_streamed_ones(client):
    kwargs = dict(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, n=2,
                  temperature=100.0, top_p=1.0, seed=3, extra_body={"top_k": 0, "min_p": 0.0})
    whole = client.chat.completions.create(**kwargs)
    assert [c.index for c in whole.choices] == [0, 1]
    text, finish = {0: "", 1: ""}, {}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            text[c.index] += c.delta.content or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert text == {c.index: c.message.content for c in whole.choices}
    assert finish == {c.index: c.finish_reason for c in whole.choices}


def test_a_list_of_prompts_numbers_choices_prompt_by_prompt(served):
    status, _, body = call(served.port, "POST", "/v1/completions",
                           dict(HOT, model="qwen2", prompt=[PROMPT, PROMPT[:3]], max_tokens=2, n=2))
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["prompt_tokens"] == len(PROMPT) + 3


def test_a_stop_string_ends_only_its_own_choice(served):
    req = dict(HOT, model="qwen2", prompt=PROMPT, max_tokens=12, n=2)
    first = call(served.port, "POST", "/v1/completions", req)[2]["choices"]
    texts = [c["text"] for c in first]
    cut = next((i for i in range(1, len(texts[0])) if texts[0][i:i + 2] not in texts[1]), None)
    if cut is None or not texts[0][cut:cut + 2].strip():
        pytest.skip(f"no stop string of choice 0 absent from choice 1 in {texts!r}")
    stop = texts[0][cut:cut + 2]
    again = call(served.port, "POST", "/v1/completions", dict(req, stop=[stop]))[2]
    ends = [(c["text"], c["finish_reason"]) for c in again["choices"]]
    assert ends == [(texts[0][:cut], "stop"), (texts[1], "length")]
    assert again["usage"]["completion_tokens"] < 24


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": "x", "n": 5}, "n"),  # more than the model decodes together (4)
    ("/v1/completions", {"prompt": "x", "n": 0}, "n"),
    ("/v1/completions", {"prompt": "x", "n": 129}, "n"),
    ("/v1/completions", {"prompt": "x", "best_of": 5}, "best_of"),  # more than the model decodes together
    ("/v1/completions", {"prompt": "x", "n": 3, "best_of": 2}, "best_of"),  # fewer than n
    ("/v1/completions", {"prompt": "x", "best_of": 2, "stream": True}, "best_of"),  # the best is known at the end
    ("/v1/completions", {"prompt": "x", "best_of": 0}, "best_of"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 9}, "n"),
])
def test_n_out_of_bounds_is_a_typed_400(served, path, body, param):
    error_of(served, path, dict(body, model="qwen2"), 400, param=param)


def test_a_split_stream_files_events_by_choice_and_survives_a_long_run_of_others():
    from pantheon.serve.http import choices
    from pantheon.serve.http.backend import Finished, Tokens

    class Stream:
        cancelled = []

        def __iter__(self):
            yield from (Tokens((i,), i, (), 1) for i in range(5000))  # choice 1 runs long before choice 0 says a word
            yield Tokens((7,), 0, (), 0)
            yield Finished("length", 3, 1, 1, 0)
            yield Finished("length", 3, 1, 5000, 1)

        def cancel(self, choice=None):
            self.cancelled.append(choice)

    first, second = choices.split(Stream(), 2)
    assert list(first) == [Tokens((7,), 0, (), 0), Finished("length", 3, 1, 1, 0)]
    rest = list(second)
    assert len(rest) == 5001 and rest[-1] == Finished("length", 0, 0, 5000, 1)  # the prompt counts once
    first.cancel()  # ended: nothing to stop
    assert Stream.cancelled == []
