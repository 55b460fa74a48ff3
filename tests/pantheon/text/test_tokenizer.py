"""pantheon.text.tokenizer against llama.cpp's own expected token ids for six real vocabularies."""

import time

import numpy as np
import pytest

from pantheon.errors import EngineError, GGUFError, MissingKey
from pantheon.text.tokenizer import Tokenizer
from tests.pantheon.text.vocab_cases import VOCABS, cases, vocab


@pytest.mark.parametrize("name", VOCABS)
def test_ids_match_llama_cpp(name):
    tok = vocab(name)
    wrong = [(text, want, got) for text, want in cases(name)
             if (got := tok.encode(text, add_special=False, parse_special=False)) != want]
    assert not wrong, f"{len(wrong)} mismatches, first: {wrong[0]!r}"


@pytest.mark.parametrize("name", VOCABS)
def test_decode_gives_the_text_back(name):
    tok = vocab(name)
    for text, want in cases(name):
        # SPM prefixes non-empty text with one space (llama.cpp's add_space_prefix).
        expected = " " + text if tok.model == "llama" and text else text
        assert tok.decode(want) == expected


def test_special_text_is_split_only_with_parse_special():
    tok = vocab("qwen2")
    text = "<|im_start|>user\nhi<|im_end|>"
    start, end = tok.token_to_id["<|im_start|>"], tok.token_to_id["<|im_end|>"]
    parsed = tok.encode(text, parse_special=True)
    assert parsed[0] == start and parsed[-1] == end
    assert parsed[1:-1] == tok.encode("user\nhi")
    plain = tok.encode(text, parse_special=False)
    assert start not in plain and end not in plain
    assert tok.decode(plain) == text


def test_spm_special_tokens_restart_the_space_prefix():
    tok = vocab("llama-spm")
    ids = tok.encode("<s>Hello</s>", add_special=False, parse_special=True)
    assert ids == [1, *tok.encode("Hello", add_special=False), 2]


def test_phi3_special_tokens_eat_following_whitespace():
    tok = vocab("phi-3")
    user = tok.token_to_id["<|user|>"]
    # llama.cpp sets RSTRIP on Phi-3's special tokens (general.name contains "phi3").
    assert tok.encode("<|user|>\nHi", add_special=False, parse_special=True) == [
        user, *tok.encode("Hi", add_special=False)]


@pytest.mark.parametrize("name, bos_first", [("llama-spm", True), ("phi-3", True), ("llama-bpe", True),
                                             ("qwen2", False), ("gpt-2", False)])
def test_add_special_follows_metadata(name, bos_first):
    tok = vocab(name)
    plain = tok.encode("Hello world", add_special=False)
    with_special = tok.encode("Hello world", add_special=True)
    assert with_special == ([tok.bos_id] + plain if bos_first else plain)
    assert tok.encode("", add_special=True) == ([tok.bos_id] if bos_first else [])


@pytest.mark.parametrize("name, ids", [
    ("llama-spm", {"bos": 1, "eos": 2}),
    ("llama-bpe", {"bos": 128000, "eos": 128001, "eot": 128009}),
    ("qwen2", {"bos": 151643, "eos": 151643, "eot": 151645}),
    ("phi-3", {"bos": 1, "eos": 32000, "eot": 32007}),
])
def test_special_ids(name, ids):
    tok = vocab(name)
    for role, tid in ids.items():
        assert getattr(tok, f"{role}_id") == tid


@pytest.mark.parametrize("name, texts", [
    ("llama-bpe", ["<|end_of_text|>", "<|eot_id|>"]),
    ("qwen2", ["<|endoftext|>", "<|im_end|>"]),
    ("phi-3", ["<|endoftext|>", "<|end|>", "</s>"]),
    ("gpt-2", ["<|endoftext|>"]),
])
def test_stop_ids_hold_end_of_turn_tokens(name, texts):
    tok = vocab(name)
    for text in texts:
        assert tok.token_to_id[text] in tok.stop_ids
    assert tok.eos_id in tok.stop_ids
    assert tok.token_to_id.get("<|im_start|>") not in tok.stop_ids


def test_control_tokens_render_only_when_asked():
    tok = vocab("llama-bpe")
    ids = tok.encode("<|start_header_id|>user<|end_header_id|>", add_special=False, parse_special=True)
    assert tok.decode(ids) == "user"
    assert tok.decode(ids, special=True) == "<|start_header_id|>user<|end_header_id|>"
    assert tok.is_special(ids[0]) and not tok.is_special(ids[1])


def test_token_text_and_vocab_size():
    tok = vocab("gpt-2")
    assert tok.n_vocab == 50257
    assert tok.token_text(tok.encode(" world", add_special=False)[0]) == "\u0120world"
    with pytest.raises(EngineError):
        tok.token_text(50257)
    with pytest.raises(EngineError):
        tok.decode([-1])


def _meta(**extra):
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
            "tokenizer.ggml.tokens": ["a", "b", "ab"], "tokenizer.ggml.merges": ["a b"],
            "tokenizer.ggml.token_type": np.array([1, 1, 1], np.int32)}
    meta.update(extra)
    return meta


def test_from_metadata_small_vocab():
    tok = Tokenizer.from_metadata(_meta())
    assert tok.encode("abab", add_special=False) == [2, 2]
    assert tok.decode([2, 0]) == "aba"


@pytest.mark.parametrize("meta, error", [
    (_meta(**{"tokenizer.ggml.model": "bert"}), GGUFError),
    (_meta(**{"tokenizer.ggml.pre": "no-such-pre"}), GGUFError),
    ({k: v for k, v in _meta().items() if k != "tokenizer.ggml.merges"}, MissingKey),
    ({k: v for k, v in _meta().items() if k != "tokenizer.ggml.tokens"}, MissingKey),
    (_meta(**{"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 99}), GGUFError),
    (_meta(**{"tokenizer.ggml.token_type": np.array([1, 1], np.int32)}), GGUFError),
])
def test_unsupported_metadata_is_refused(meta, error):
    with pytest.raises(error):
        Tokenizer.from_metadata(meta)


@pytest.mark.parametrize("name", ["llama-spm", "qwen2"])
def test_encoding_a_2000_token_prompt_is_fast(name):
    tok = vocab(name)
    text = " ".join(t for t, _ in cases(name)) * 3
    tok.encode("warm up the compiled regexes")
    t0 = time.perf_counter()
    n = len(tok.encode(text))
    per_2000 = (time.perf_counter() - t0) * 2000 / n
    # Budget 100 ms; the bound is loose because CI machines here are shared.
    assert n > 1000 and per_2000 < 0.2, (n, per_2000)


def test_fim_marks_come_from_gguf_keys_else_from_llama_cpps_texts():
    """Texts llama.cpp knows (Qwen's, CodeLlama's) are found and made control tokens, as its loader makes
    them; a fim_*_token_id key wins over a text."""
    tokens = ["a", "b", "<|fim_prefix|>", "▁<SUF>", "<fim-middle>", "<|file_sep|>", "ab"]
    meta = _meta(**{"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": np.ones(len(tokens), np.int32)})
    tok = Tokenizer.from_metadata(meta)
    assert tok.fim_ids == {"fim_pre": 2, "fim_suf": 3, "fim_mid": 4, "fim_sep": 5}
    assert all(tok.is_special(i) for i in (2, 3, 4, 5)) and not tok.is_special(6)
    assert tok.encode("a<|fim_prefix|>b", add_special=False, parse_special=True) == [0, 2, 1]
    keyed = Tokenizer.from_metadata(dict(meta, **{"tokenizer.ggml.fim_pre_token_id": 6}))
    assert keyed.fim_ids["fim_pre"] == 6 and keyed.fim_ids["fim_suf"] == 3
