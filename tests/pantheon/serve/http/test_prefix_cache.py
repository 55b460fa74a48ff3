"""The automatic prefix cache over HTTP: a repeated prompt without a session reports cached_tokens, runs
only its last prompt token through the model, and answers what the uncached run answered."""

import pytest

import pantheon
from tests.conftest import shared_path
from tests.pantheon.serve.http.server import GOLDEN, Served, call


class Counting:
    """A Model whose forward passes are counted: every token id run through the weights."""

    def __init__(self, model):
        self.model, self.forwarded = model, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, segments, all_logits=False, hidden=()):
        self.forwarded += sum(len(t) for _, t in segments)
        return self.model.forward(segments, all_logits, hidden)


@pytest.fixture(scope="module")
def counted():
    model = Counting(pantheon.open_model(str(shared_path("golden", GOLDEN["qwen2"])), threads=1))
    server = Served({"qwen2": model})
    yield server, model
    server.close()


def test_a_repeated_prompt_is_served_from_the_prefix_cache_with_the_same_greedy_output(counted):
    server, model = counted
    body = {"prompt": ("A prefix cache keeps the keys and values that an earlier request computed for its prompt, "
                        "so that a later request starting with the same tokens"), "max_tokens": 8,
            "temperature": 0}
    first = call(server.port, "POST", "/v1/completions", body)[2]
    before = model.forwarded
    second = call(server.port, "POST", "/v1/completions", body)[2]
    n_prompt = first["usage"]["prompt_tokens"]
    assert n_prompt >= 16  # a full block at least: shorter prompts are not cached
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt - 1
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    fed = second["usage"]["completion_tokens"] - (second["choices"][0]["finish_reason"] == "length")
    assert model.forwarded - before == 1 + fed  # the prompt's last token, then the reply
    native = call(server.port, "POST", "/completion", {"prompt": body["prompt"], "n_predict": 4,
                                                         "temperature": 0})[2]
    assert native["tokens_cached"] == n_prompt - 1 and native["timings"]["cache_n"] == n_prompt - 1
