"""The HF tokenizer wrapper against the `tokenizers` library (the reference), specials and templates."""

import json

import pytest
import tokenizers

from pantheon.source import open_text
from pantheon.text.detokenize import Detokenizer
from pantheon.text.hf_tokenizer import HFTokenizer, HFTokenizerError
from pantheon.text.prompting import PromptBuilder
from tests.pantheon.hf.tinyhf import make_hf

TEXTS = ["Hello world!", "  leading spaces\tand\ttabs\n\nnewlines", "été 日本語 🙂🙂 12345", "",
         "<|im_start|>user\nhi<|im_end|>", "The quick brown fox jumps over the lazy dog."]


@pytest.fixture(scope="module", params=["qwen3", "mistral"])
def model(request, tmp_path_factory):
    d, _, _ = make_hf(tmp_path_factory.mktemp(request.param) / "m", request.param)
    return d, tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))


def test_ids_equal_the_library(model):
    d, ref = model
    tok, _, _ = open_text(str(d))
    for text in TEXTS:
        assert tok.encode(text, add_special=True, parse_special=True) == ref.encode(text).ids
        assert tok.encode(text, add_special=False, parse_special=True) == ref.encode(text, add_special_tokens=False).ids


def test_special_text_is_literal_unless_parsed(model):
    d, _ = model
    tok, _, _ = open_text(str(d))
    end = tok.token_to_id["<|im_end|>"]
    assert end in tok.encode("a<|im_end|>", parse_special=True)
    assert end not in tok.encode("a<|im_end|>", parse_special=False)
    assert tok.decode(tok.encode("a<|im_end|>", add_special=False)).endswith("a<|im_end|>")


def test_streaming_equals_decode_and_the_library(model):
    d, ref = model
    tok, _, _ = open_text(str(d))
    for text in TEXTS:
        ids = tok.encode(text, add_special=False)
        detok = Detokenizer(tok)
        streamed = "".join(detok.push(i) for i in ids) + detok.flush()
        assert streamed == tok.decode(ids)
        want = ref.decode(ids, skip_special_tokens=False)
        # the SPM decoder strips the one leading space its normalizer prepended; per-token pieces keep it
        assert tok.decode(ids, special=True) in (want, " " + want), text


def test_specials_from_the_json_files(tmp_path):
    d, _, _ = make_hf(tmp_path / "m", "mistral")
    tok, meta, _ = open_text(str(d))
    ref = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, True)
    assert tok.stop_ids == {2, ref.token_to_id("<|endoftext|>"), ref.token_to_id("<|im_end|>")}
    assert tok.is_special(1) and tok.token_bytes(1) == b"" and tok.token_bytes(1, special=True) == b"<s>"
    ids = PromptBuilder(tok, meta).chat([{"role": "user", "content": "hi"}])
    assert ids == ref.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n").ids
    q, _, _ = make_hf(tmp_path / "q", "qwen3")
    qtok, qmeta, _ = open_text(str(q))
    assert qtok.bos_id is None and not qtok.add_bos and "tokenizer.ggml.bos_token_id" not in qmeta


def test_chat_template_file_wins(tmp_path):
    d, _, _ = make_hf(tmp_path / "m", "qwen3")
    (d / "chat_template.jinja").write_text("{{ messages[0]['content'] }}!")
    tok, meta, _ = open_text(str(d))
    assert tok.decode(PromptBuilder(tok, meta).chat([{"role": "user", "content": "yo"}])) == "yo!"


def test_truncation_in_the_file_is_ignored(tmp_path):
    d, _, _ = make_hf(tmp_path / "m", "qwen3")
    spec = json.loads((d / "tokenizer.json").read_text())
    spec["truncation"] = {"direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0}
    (d / "tokenizer.json").write_text(json.dumps(spec))
    tok, _, _ = open_text(str(d))
    assert len(tok.encode("Hello world! The quick brown fox")) > 2


def test_missing_or_malformed_tokenizer(tmp_path):
    with pytest.raises(HFTokenizerError, match="absent"):
        HFTokenizer(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Nope"}}')
    with pytest.raises(HFTokenizerError, match="tokenizers library"):
        HFTokenizer(str(tmp_path / "tokenizer.json"))


def test_padded_vocabulary(tmp_path):
    """config.json's vocab_size past tokenizer.json: padding ids exist, render as nothing; fewer is refused."""
    d, cfg, _ = make_hf(tmp_path / "m", "qwen3")
    tok, _, _ = open_text(str(d))
    ref = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    assert tok.n_vocab == cfg["vocab_size"] > ref.get_vocab_size()
    last = cfg["vocab_size"] - 1
    assert tok.token_text(last) == f"[PAD{last}]" and tok.decode([last], special=True) == ""
    cfg["vocab_size"] = ref.get_vocab_size() - 1
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFTokenizerError, match="more than the model's vocab_size"):
        open_text(str(d))
