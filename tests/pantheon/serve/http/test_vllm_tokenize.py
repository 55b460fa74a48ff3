"""vLLM's /tokenize and /detokenize shapes, served beside llama-server's on the same routes."""

import pytest

from tests.pantheon.serve.http.server import call

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def tokenizer(reference):
    """qwen2's tokenizer, opened apart from the server."""
    return reference["qwen2"].tokenizer


def test_a_prompt_is_tokenized_with_its_special_tokens_as_vllm_answers(qwen, tokenizer):
    status, _, out = call(qwen.port, "POST", "/tokenize", {"model": "qwen2", "prompt": "Hello world",
                                                           "return_token_strs": True})
    ids = tokenizer.encode("Hello world", add_special=True, parse_special=True)
    assert status == 200 and out == {"count": len(ids), "max_model_len": 256, "tokens": ids,
                                     "token_strs": [tokenizer.tokens[i] for i in ids]}, out
    bare = call(qwen.port, "POST", "/tokenize", {"prompt": "Hello world", "add_special_tokens": False})[2]
    assert bare["tokens"] == tokenizer.encode("Hello world", add_special=False) and bare["token_strs"] is None
    status, _, text = call(qwen.port, "POST", "/detokenize", {"model": "qwen2", "tokens": bare["tokens"]})
    assert status == 200 and text["prompt"] == text["content"] == tokenizer.decode(bare["tokens"])


@pytest.mark.parametrize("messages", [MESSAGES, MESSAGES + [{"role": "assistant", "content": "The colour"}]])
def test_a_chat_is_tokenized_as_the_chat_route_prompts_it(qwen, messages):
    """A final assistant message is counted as the chat route runs it: continued (the assistant prefill)."""
    status, _, out = call(qwen.port, "POST", "/tokenize", {"model": "qwen2", "messages": messages})
    assert status == 200 and out["count"] == len(out["tokens"]), out
    chat = call(qwen.port, "POST", "/v1/chat/completions", {"model": "qwen2", "messages": messages, "max_tokens": 1})
    assert out["count"] == chat[2]["usage"]["prompt_tokens"]
    rendered = call(qwen.port, "POST", "/apply-template", {"messages": messages})[2]["prompt"]
    assert call(qwen.port, "POST", "/detokenize", {"tokens": out["tokens"]})[2]["prompt"].endswith(rendered)


@pytest.mark.parametrize("body, param", [({"prompt": 5}, "prompt"), ({"prompt": "x", "add_special_tokens": 1},
                                                                      "add_special_tokens"),
                                         ({"prompt": "x", "frobnicate": 1}, "frobnicate"),
                                         ({"messages": MESSAGES, "add_special_tokens": True}, "add_special_tokens"),
                                         ({"messages": "hi"}, "messages"), ({"model": 5, "prompt": "x"}, "model")])
def test_a_bad_vllm_body_is_a_400_naming_the_field(qwen, body, param):
    status, _, out = call(qwen.port, "POST", "/tokenize", body)
    assert status == 400 and out["error"]["param"] == param, out
