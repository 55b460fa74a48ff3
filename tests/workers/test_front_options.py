"""pantheon-serve's front-side flags reach the HTTP app of every front process."""

import json
import urllib.request

import pytest

import pantheon
from pantheon.text.prompting import PromptBuilder
from tests.conftest import shared_path
from tests.workers.serving import Server

ASK = {"role": "user", "content": "Say a number."}
STARTED = {"role": "assistant", "content": "The number is"}


@pytest.fixture(scope="module")
def server():
    srv = Server(["--model", str(shared_path("golden", "qwen2-q8_0.gguf")), "--name", "qwen2", "--ctx-cap", "256",
                  "--http-workers", "1", "--no-prefill-assistant"])
    yield srv
    srv.stop()


def post(server, path, body):
    req = urllib.request.Request(server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def test_no_prefill_assistant_makes_a_final_assistant_message_a_finished_turn(server):
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    prompts = PromptBuilder(model.tokenizer, model.gguf.metadata)
    applied = post(server, "/apply-template", {"messages": [ASK, STARTED]})["prompt"]
    assert applied == prompts.render([ASK, STARTED])  # the turn closed, a new one opened after it
    assert applied != prompts.render([ASK]) + STARTED["content"]  # what the default (a prefill) gives
    out = post(server, "/v1/chat/completions", {"messages": [ASK, STARTED], "max_tokens": 1,
                                                "continue_final_message": True, "add_generation_prompt": False})
    assert out["usage"]["prompt_tokens"] == len(prompts.encode_chat(prompts.render([ASK]) + STARTED["content"]))
