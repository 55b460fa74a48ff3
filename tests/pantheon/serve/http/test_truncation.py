"""vLLM's truncate_prompt_tokens: a prompt keeps its last tokens (checked against the engine's greedy answer to
them), an embedding input its first with its special tokens (checked against Hugging Face's truncation)."""

import numpy as np
import pytest

from pantheon.serve.http import truncation
from pantheon.serve.http.errors import RequestError
from tests.pantheon.serve.http.server import call, greedy_ids

N_CTX = 256  # the `served` fixture's context
LONG = " ".join(f"word{i % 97} of the tale" for i in range(2000))  # ~12,000 tokens: over any bound of the context


@pytest.mark.parametrize("value", [0, -2, "5", True, 1.5])
def test_anything_but_minus_one_or_a_positive_count_is_refused(value):
    with pytest.raises(RequestError) as err:
        truncation.field("truncate_prompt_tokens", value)
    assert err.value.param == "truncate_prompt_tokens"


def test_minus_one_keeps_what_the_context_holds_beside_the_tokens_to_generate():
    served = type("Served", (), {"n_ctx": 256})
    assert [truncation.limit(served, asked, room) for asked, room in [(None, 1), (-1, 8), (-1, 1), (-1, 0), (40, 8)]] \
        == [None, 248, 255, 255, 40]


class HuggingFace:
    """A Hugging Face tokenizer ([CLS] text [SEP]) seen through the interface first_ids reads."""

    def __init__(self):
        tokenizers = pytest.importorskip("tokenizers")
        words = {w: i for i, w in enumerate(["[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(50)])}
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        tok.post_processor = tokenizers.processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                                     special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
        self.tok = tok

    def encode(self, text, add_special=True, parse_special=False):
        self.tok.no_truncation()
        return self.tok.encode(text, add_special_tokens=add_special).ids

    def truncated(self, text, keep):
        self.tok.enable_truncation(max_length=keep)
        return self.tok.encode(text).ids


@pytest.mark.parametrize("keep", [3, 4, 10, 49, 50, 80])
def test_an_embedding_input_keeps_its_first_tokens_and_its_special_ones_as_hugging_face_cuts(keep):
    hf, text = HuggingFace(), " ".join(f"w{i % 50}" for i in range(48))
    assert truncation.first_ids(hf, text, keep) == hf.truncated(text, keep)


def test_a_prompt_keeps_its_last_tokens_as_the_whole_text_tokenized_gives_them(served, reference):
    """A text far over what the context can hold is not refused: its last tokens are the prompt."""
    tok = served.backend.served("llama").tokenizer
    kept = tok.encode(LONG, add_special=True)[-100:]
    status, _, out = call(served.port, "POST", "/v1/completions", {
        "model": "llama", "prompt": LONG, "max_tokens": 6, "temperature": 0, "truncate_prompt_tokens": 100})
    assert status == 200, out
    assert out["usage"]["prompt_tokens"] == 100
    assert out["choices"][0]["text"] == tok.decode(greedy_ids(reference["llama"], kept, 6, N_CTX))
    status, _, out = call(served.port, "POST", "/v1/completions", {"model": "llama", "prompt": LONG, "max_tokens": 6})
    assert status == 400, out  # without it, the same text is refused


def test_token_prompts_echo_and_minus_one(served):
    ids = list(range(300, 600))  # 300 ids: over the context
    status, _, out = call(served.port, "POST", "/v1/completions", {
        "model": "llama", "prompt": ids, "max_tokens": 8, "temperature": 0, "truncate_prompt_tokens": -1,
        "echo": True, "logprobs": 0})
    assert status == 200, out
    assert out["usage"]["prompt_tokens"] == N_CTX - 8
    echoed = served.backend.served("llama").tokenizer.decode(ids[-(N_CTX - 8):])
    assert out["choices"][0]["text"].startswith(echoed)
    assert len(out["choices"][0]["logprobs"]["tokens"]) == N_CTX - 8 + out["usage"]["completion_tokens"]
    status, _, out = call(served.port, "POST", "/v1/completions", {
        "model": "llama", "prompt": "def f(", "suffix": "return 1", "truncate_prompt_tokens": 5})
    assert status == 400 and out["error"]["param"] == "suffix", out


def test_a_chat_prompt_keeps_the_last_tokens_of_the_rendered_conversation(served, reference):
    messages = [{"role": "user", "content": LONG[:3000]}]
    full = chat_ids(served, messages)
    status, _, out = call(served.port, "POST", "/v1/chat/completions", {
        "model": "llama", "messages": messages, "max_tokens": 4, "temperature": 0, "truncate_prompt_tokens": 50})
    assert status == 200, out
    assert out["usage"]["prompt_tokens"] == 50 < len(full)
    want = greedy_ids(reference["llama"], full[-50:], 4, N_CTX)
    assert out["choices"][0]["message"]["content"] == served.backend.served("llama").tokenizer.decode(want)


def chat_ids(served, messages):
    prompts = served.backend.served("llama").prompts
    return prompts.encode_chat(prompts.render(messages))


def test_an_embedding_input_over_the_context_is_embedded_from_its_first_tokens(served):
    tok = served.backend.served("qwen2").tokenizer
    first = tok.encode(LONG, add_special=True, parse_special=True)[:40]
    status, _, cut = call(served.port, "POST", "/v1/embeddings", {
        "model": "qwen2", "input": [LONG, first + [7, 8]], "truncate_prompt_tokens": 40, "encoding_format": "float"})
    assert status == 200, cut
    status, _, alone = call(served.port, "POST", "/v1/embeddings", {
        "model": "qwen2", "input": first, "encoding_format": "float"})
    assert cut["usage"]["prompt_tokens"] == 80
    for row in cut["data"]:
        np.testing.assert_allclose(row["embedding"], alone["data"][0]["embedding"], atol=1e-6)
    status, _, out = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": LONG})
    assert status == 400, out
