"""llama-server's `timings` on the OpenAI routes and /completion, and with timings_per_token on every chunk."""

import json
import time
from types import SimpleNamespace

import pytest

from pantheon.serve.http import timings
from pantheon.serve.http.shapes import usage
from tests.pantheon.serve.http.server import call

USER = [{"role": "user", "content": "Tell me a story."}]
NO_EOS = {"2": -100}  # the golden qwen2 vocabulary's end-of-text id: every answer runs its full length
KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
        "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}


def gen(started, first, ended, prompt, cached, completion):
    return SimpleNamespace(started=started, first_at=first, ended_at=ended, tokens=completion,
                           usage=usage(prompt, completion, cached))


def test_final_counts_uncached_prompt_tokens_and_times_from_the_start():
    out = timings.final([gen(10.0, 10.5, 12.5, prompt=100, cached=60, completion=40)])
    assert out["cache_n"] == 60 and out["prompt_n"] == 40 and out["predicted_n"] == 40
    assert out["prompt_ms"] == pytest.approx(500) and out["prompt_per_second"] == pytest.approx(80)
    assert out["predicted_ms"] == pytest.approx(2000) and out["predicted_per_token_ms"] == pytest.approx(50)
    assert out["predicted_per_second"] == pytest.approx(20) and set(out) == KEYS


def test_final_over_several_choices_spans_first_token_to_last_end():
    # choice 1 of the same prompt counts no prompt tokens (Generation.usage), as OpenAI's usage does
    out = timings.final([gen(0.0, 0.2, 1.0, 50, 0, 8), gen(0.0, 0.25, 1.5, 0, 0, 10)])
    assert (out["prompt_n"], out["predicted_n"]) == (50, 18)
    assert out["prompt_ms"] == pytest.approx(200) and out["predicted_ms"] == pytest.approx(1300)


def test_an_answer_without_tokens_is_all_prompt_time():
    """n_predict 0: the prompt runs into the cache and nothing is generated."""
    out = timings.final([gen(3.0, None, 3.4, prompt=20, cached=5, completion=0)])
    assert out["prompt_ms"] == pytest.approx(400) and out["predicted_ms"] == 0 and out["predicted_n"] == 0


def test_partial_tells_the_generation_so_far_and_no_prompt_counts_before_the_first_token():
    now = time.perf_counter()
    waiting = SimpleNamespace(started=now, first_at=None, tokens=0, usage=usage(), prompt_seen=None)
    out = timings.partial(waiting)
    assert out["predicted_n"] == 0 and out["predicted_per_second"] == 0
    assert "prompt_n" not in out and "cache_n" not in out


def test_partial_has_the_prompt_counts_the_first_token_brought():
    now = time.perf_counter()
    running = SimpleNamespace(started=now - 1.0, first_at=now - 0.5, tokens=5, usage=usage(), prompt_seen=(30, 20))
    out = timings.partial(running)
    assert out["predicted_n"] == 5 and out["prompt_ms"] == pytest.approx(500) and 400 < out["predicted_ms"] < 5000
    assert set(out) == KEYS and (out["prompt_n"], out["cache_n"]) == (10, 20)
    assert out["prompt_per_second"] == pytest.approx(20, rel=0.05)


def events(text):
    return [json.loads(b[len("data: "):]) for b in text.split("\n\n") if b and b != "data: [DONE]"]


def test_a_whole_chat_answer_carries_timings_that_agree_with_its_usage(qwen):
    body = {"messages": USER, "max_tokens": 6, "temperature": 0, "logit_bias": NO_EOS}
    status, _, out = call(qwen.port, "POST", "/v1/chat/completions", body)
    assert status == 200 and set(out["timings"]) == KEYS
    t, u = out["timings"], out["usage"]
    assert t["predicted_n"] == u["completion_tokens"] == 6
    assert t["prompt_n"] + t["cache_n"] == u["prompt_tokens"] and t["cache_n"] == u["prompt_tokens_details"][
        "cached_tokens"]
    assert t["prompt_ms"] > 0 and t["predicted_per_second"] == pytest.approx(6000 / t["predicted_ms"])
    again = call(qwen.port, "POST", "/v1/chat/completions", body)[2]["timings"]
    assert again["cache_n"] > 0 and again["prompt_n"] + again["cache_n"] == u["prompt_tokens"]  # the prefix cache


def test_the_webui_stream_has_timings_on_every_chunk_and_the_whole_object_last(qwen):
    """llama.cpp's web UI sends stream and timings_per_token with every chat request."""
    body = {"messages": USER, "max_tokens": 6, "temperature": 0, "logit_bias": NO_EOS, "stream": True,
            "timings_per_token": True}
    status, _, text = call(qwen.port, "POST", "/v1/chat/completions", body)
    assert status == 200 and text.endswith("data: [DONE]\n\n")
    chunks = events(text)
    content = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert content and all("timings" in c for c in content)
    counts = [c["timings"]["predicted_n"] for c in content]
    assert counts == sorted(counts) and counts[-1] <= 6
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "length" and set(last["timings"]) == KEYS
    assert last["timings"]["predicted_n"] == 6
    prompt = {(c["timings"]["prompt_n"], c["timings"]["cache_n"]) for c in content}  # from the first token on
    assert prompt == {(last["timings"]["prompt_n"], last["timings"]["cache_n"])}


def test_with_include_usage_the_timings_ride_the_usage_chunk(qwen):
    body = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logit_bias": NO_EOS, "stream": True,
            "stream_options": {"include_usage": True}}
    status, _, text = call(qwen.port, "POST", "/v1/completions", body)
    chunks = events(text)
    assert status == 200 and chunks[-1]["choices"] == [] and set(chunks[-1]["timings"]) == KEYS
    assert chunks[-1]["timings"]["predicted_n"] == chunks[-1]["usage"]["completion_tokens"] == 4
    assert not any("timings" in c for c in chunks[:-1])  # no timings_per_token: only the last chunk


def test_completion_streams_timings_per_token_when_asked(qwen):
    body = {"prompt": "Once upon a time", "n_predict": 5, "temperature": 0, "logit_bias": NO_EOS, "stream": True}
    plain = events(call(qwen.port, "POST", "/completion", body)[2])
    assert not any("timings" in e for e in plain[:-1]) and set(plain[-1]["timings"]) == KEYS
    timed = events(call(qwen.port, "POST", "/completion", dict(body, timings_per_token=True))[2])
    assert all("predicted_n" in e["timings"] for e in timed) and timed[-1]["timings"]["predicted_n"] == 5
