"""Responses `truncation: "auto"`: the oldest turns go until the conversation fits; `disabled` refuses it."""

import pytest

from pantheon.serve.http.responses_truncation import fitted
from pantheon.serve.http.validate import Parsed
from tests.pantheon.serve.http.server import call, stored_served

N_CTX = 512


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    server = stored_served(tmp_path_factory.mktemp("store"), n_ctx=N_CTX)
    yield server
    server.close()


def conversation(turns):
    """`turns` user / assistant exchanges of about 120 tokens each, then a last short question."""
    items = []
    for k in range(turns):
        items += [{"role": "user", "content": f"Turn {k}: " + "tell me more about the river " * 20},
                  {"role": "assistant", "content": f"Answer {k}: " + "the river runs to the sea " * 20}]
    return items + [{"role": "user", "content": "And the sea?"}]


def ask(kept, items, **extra):
    body = dict({"model": "qwen2", "input": items, "max_output_tokens": 8, "temperature": 0,
                 "instructions": "Be brief."}, **extra)
    return call(kept.port, "POST", "/v1/responses", body)


def test_auto_drops_the_oldest_turns_until_it_fits_and_answers_as_that_suffix_would(kept):
    items = conversation(5)
    status, _, out = ask(kept, items)
    assert status == 400 and out["error"]["code"] == "context_over_budget", out  # disabled, the default
    status, _, auto = ask(kept, items, truncation="auto")
    assert status == 200 and auto["truncation"] == "auto", auto
    # the longest suffix that starts at a user turn and leaves room for the 8 output tokens
    counts = {k: call(kept.port, "POST", "/v1/responses/input_tokens", {"model": "qwen2", "input": items[k:],
                                                                        "instructions": "Be brief."})[2]
              for k in range(0, len(items), 2)}
    first = min(k for k, c in counts.items() if "input_tokens" in c and c["input_tokens"] + 8 <= N_CTX)
    assert first > 0 and auto["usage"]["input_tokens"] == counts[first]["input_tokens"]
    assert auto["output"][0]["content"][0]["text"] == ask(kept, items[first:])[2]["output"][0]["content"][0]["text"]
    # input_tokens has no max_output_tokens: auto keeps what leaves one token of room
    counted = call(kept.port, "POST", "/v1/responses/input_tokens", {"model": "qwen2", "input": items,
                                                                     "instructions": "Be brief.", "truncation": "auto"})
    fits = min(k for k, c in counts.items() if "input_tokens" in c and c["input_tokens"] < N_CTX)
    assert counted[2]["input_tokens"] == counts[fits]["input_tokens"]


def test_a_newest_turn_that_alone_does_not_fit_is_still_refused(kept):
    status, _, out = ask(kept, [{"role": "user", "content": "river " * 600}], truncation="auto")
    assert status == 400 and out["error"]["code"] == "context_over_budget", out


def test_a_bad_mode_is_a_400(kept):
    status, _, out = ask(kept, "Hi", truncation="middle")
    assert status == 400 and out["error"]["param"] == "truncation", out


def test_system_messages_stay_and_a_lone_turn_is_kept(kept):
    served = kept.backend.served("qwen2")
    messages = [{"role": "system", "content": "S"}] + conversation(5)
    parsed = fitted(served, Parsed(messages=messages), 8)
    assert parsed.messages[0] == messages[0] and parsed.messages[1]["role"] == "user"
    assert parsed.messages[-1] == messages[-1] and len(parsed.messages) < len(messages)
    lone = Parsed(messages=[{"role": "user", "content": "river " * 600}])
    assert fitted(served, lone, 8) == lone
