"""pantheon.text.detokenize: streamed text never holds a broken UTF-8 character."""

import pytest

from pantheon.text.detokenize import Detokenizer
from tests.pantheon.text.vocab_cases import vocab


def _partial(tok, ids):
    """Ids whose own bytes are not valid UTF-8 (a character continues into the next token)."""
    out = []
    for i in ids:
        try:
            tok.token_bytes(i).decode("utf-8")
        except UnicodeDecodeError:
            out.append(i)
    return out


@pytest.mark.parametrize("name, text", [
    ("llama-spm", " this is \U0001F999.cpp"),                   # byte-fallback tokens of an emoji
    ("phi-3", "\U0001F680 (normal) \U0001F636\u200d\U0001F32B\ufe0f"),
    ("qwen2", "\u6211\u60f3\u5728apple\u5de5\u4f5c \U0001F601"),  # byte-level pieces of CJK and emoji
    ("llama-bpe", "\u1780\u17b6\u1793\u17cb\u178f\u17c2 \U0001F999\U0001F999"),
    ("gpt-2", "\u0430\u043f\u043f\u043b\u0435 \U0001F680 \u4e2d\u6587"),
])
def test_streamed_pieces_are_whole_characters(name, text):
    tok = vocab(name)
    ids = tok.encode(text, add_special=False)
    assert _partial(tok, ids), "the case must split a character across tokens"
    detok = Detokenizer(tok)
    pieces = [detok.push(i) for i in ids] + [detok.flush()]
    assert "".join(pieces) == tok.decode(ids)
    assert not any("\ufffd" in p for p in pieces)
    for ch in set(text) - {" "}:
        assert sum(p.count(ch) for p in pieces) == text.count(ch)


def test_partial_character_is_held_back():
    tok = vocab("llama-spm")
    ids = tok.encode("\U0001F999", add_special=False)[1:]  # drop the "▁" prefix token
    detok = Detokenizer(tok)
    assert [detok.push(i) for i in ids] == ["", "", "", "\U0001F999"]
    assert not detok.pending


def test_truncated_character_flushes_as_replacement():
    tok = vocab("llama-spm")
    ids = tok.encode("\U0001F999", add_special=False)[1:3]
    detok = Detokenizer(tok)
    assert detok.push_many(ids) == "" and detok.pending
    assert detok.flush() == "\ufffd" == tok.decode(ids)


def test_special_tokens_render_on_request():
    tok = vocab("qwen2")
    ids = tok.encode("<|im_start|>hi<|im_end|>", parse_special=True)
    assert Detokenizer(tok).push_many(ids) == "hi"
    assert Detokenizer(tok, special=True).push_many(ids) == "<|im_start|>hi<|im_end|>"
