"""The vocabulary types beyond SPM/BPE: WPM (BERT), UGM (T5 Unigram), RWKV World, and refusals."""

import numpy as np
import pytest

from pantheon.errors import GGUFError
from pantheon.gguf.file import open_gguf
from pantheon.text.rwkv import RwkvEncoder, unescape_token, world_vocab_metadata
from pantheon.text.tokenizer import Tokenizer, open_rwkv_world_vocab
from tests.pantheon.text.llama_vocabs import WITH_VECTORS, llama_cases, llama_vocab, llama_vocab_path


def test_bert_frames_text_with_cls_and_sep():
    tok = llama_vocab("bert-bge")
    assert tok.vocab_type == "WPM"
    plain = tok.encode("Hello, World!", add_special=False)
    # llama.cpp's converter spells word-initial pieces with U+2581 (and continuations without "##").
    assert [tok.token_text(i) for i in plain] == ["\u2581hello", "\u2581,", "\u2581world", "\u2581!"]
    assert tok.encode("Hello, World!") == [101, *plain, 102]


def test_gemma4_always_adds_bos_and_spells_spaces_as_u2581():
    tok = llama_vocab("gemma-4")
    assert tok.pre.family == "GEMMA4" and tok.add_bos
    ids = tok.encode("Hello world", add_special=False)
    assert tok.encode("Hello world") == [tok.bos_id, *ids]
    assert tok.decode(ids) == "Hello world"


def _hf_unigram(meta, tok):
    """The same Unigram vocabulary in HuggingFace `tokenizers`, the reference implementation."""
    tk = pytest.importorskip("tokenizers")
    scores = np.asarray(meta["tokenizer.ggml.scores"], np.float32).tolist()
    hf = tk.Tokenizer(tk.models.Unigram(list(zip(tok.tokens, scores)), unk_id=tok.unk_id, byte_fallback=False))
    charsmap = np.asarray(meta["tokenizer.ggml.precompiled_charsmap"]).astype(np.uint8).tobytes()
    # XLM-RoBERTa's tokenizer.json: the charsmap, runs of spaces to one, then a leading U+2581.
    hf.normalizer = tk.normalizers.Sequence([tk.normalizers.Precompiled(charsmap),
                                             tk.normalizers.Replace(tk.Regex(" {2,}"), " ")])
    hf.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    return hf


def test_ugm_matches_huggingface_unigram_on_llama_cpps_test_texts():
    tok = llama_vocab("nomic-bert-moe")
    assert tok.vocab_type == "UGM"
    hf = _hf_unigram(open_gguf(str(llama_vocab_path("nomic-bert-moe"))).metadata, tok)
    # Leading/trailing/doubled spaces are where SentencePiece and HF's pipeline differ by design.
    texts = {" ".join(t.split()) for name in WITH_VECTORS for t, _ in llama_cases(name)} - {""}
    wrong = [(t, got, want) for t in sorted(texts)
             if (got := tok.encode(t, add_special=False)) != (want := hf.encode(t, add_special_tokens=False).ids)]
    assert len(texts) > 30 and not wrong, f"{len(wrong)} mismatches, first: {wrong[:1]!r}"


def test_ugm_special_tokens_follow_metadata():
    tok = llama_vocab("nomic-bert-moe")
    plain = tok.encode("Hi there", add_special=False)
    assert tok.encode("Hi there") == [tok.bos_id, *plain, tok.eos_id] == [0, *plain, 2]
    assert tok.decode(plain) == " Hi there"


@pytest.mark.parametrize("spelled, raw", [
    ("abc", b"abc"), ("\\n\\t\\r", b"\n\t\r"), ("\\x00\\xff", b"\x00\xff"), ("\\\\", b"\\"),
    ("\\'", b"'"), ("\u00e9", "\u00e9".encode()), ("a\\x0", b"a"),
])
def test_rwkv_token_unescaping(spelled, raw):
    assert unescape_token(spelled) == raw


def test_rwkv_greedy_longest_match():
    enc = RwkvEncoder([b"<s>", b"a", b"b", b"c", b"ab", b"abc", b"bc d"], unk_id=0)
    assert enc.encode("abcab") == [5, 4]
    assert enc.encode("bc dx") == [6, 0]  # no token starts with 'x': unk, as llama.cpp


def _world_file(tmp_path):
    lines = [f"{b + 1} {bytes([b])!r} 1" for b in range(256)]
    lines += ["257 'ab' 2", "258 '\\n\\n' 2", "259 b'\\xe4\\xbd\\xa0' 3", "260 '你好' 6", "261 'hello world' 11"]
    path = tmp_path / "rwkv_vocab_v20230424.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_rwkv_world_vocabulary_file(tmp_path):
    tok = open_rwkv_world_vocab(str(_world_file(tmp_path)))
    assert tok.vocab_type == "RWKV" and tok.n_vocab == 65536 and tok.eot_id == 261
    text = "hello world\n\nab你好你x"
    ids = tok.encode(text)
    # '<s>' takes id 0, so line k is id k; byte b is id b + 1.
    assert ids == [261, 258, 257, 260, 259, ord("x") + 1]
    assert tok.decode(ids) == text


def test_rwkv_world_file_and_its_gguf_agree(tmp_path):
    gguf = pytest.importorskip("gguf")
    meta = world_vocab_metadata(str(_world_file(tmp_path)))
    path = tmp_path / "rwkv.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv6")
    writer.add_tokenizer_model("rwkv")
    writer.add_token_list(meta["tokenizer.ggml.tokens"])
    writer.add_token_types(meta["tokenizer.ggml.token_type"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    from pantheon.text.tokenizer import open_tokenizer
    text = "hello world\n\n\\x41\u00ff"
    assert open_tokenizer(str(path)).encode(text) == Tokenizer(meta).encode(text)


def test_rwkv_world_file_errors_are_typed(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("1 'ab' 3\n", encoding="utf-8")
    with pytest.raises(GGUFError, match="bad.txt:1"):
        world_vocab_metadata(str(path))


@pytest.mark.parametrize("model, what", [("none", "no vocabulary"), ("no_vocab", "no vocabulary"),
                                         ("no-such", "not a tokenizer llama.cpp knows")])
def test_unimplemented_vocab_types_are_refused_by_name(model, what):
    with pytest.raises(GGUFError, match=what):
        Tokenizer({"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": ["a"]})


def _plamo2(pieces):
    """A PLaMo-2 vocabulary: <unk> <s> </s> <pad>, the 256 byte tokens, then `pieces` (text, score)."""
    tokens = ["<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>", "<|plamo:pad|>"]
    tokens += [f"<0x{b:02X}>" for b in range(256)] + [p for p, _ in pieces]
    types = [2, 3, 3, 3] + [6] * 256 + [1] * len(pieces)  # unknown, control, byte, normal
    scores = [0.0] * 260 + [s for _, s in pieces]
    return Tokenizer({"tokenizer.ggml.model": "plamo2", "tokenizer.ggml.tokens": tokens,
                      "tokenizer.ggml.token_type": types, "tokenizer.ggml.scores": scores})


def test_plamo2_picks_the_best_scoring_split_with_byte_fallback():
    tok = _plamo2([("ab", -1.0), ("a", -0.4), ("b", -0.4), ("abc", -5.0), ("c", -1.0), ("▁x", -1.0)])
    ab, a, b, c = 260, 261, 262, 264  # 263 is "abc"
    assert tok.encode("ab", add_special=True) == [a, b]  # -0.8 beats -1.0; no BOS for PLaMo-2
    assert tok.encode("abc") == [a, b, c]  # -1.8 beats "abc" at -5.0
    # 'é' has no piece: its UTF-8 bytes, as byte tokens.
    assert tok.encode("\ufeffaé") == [a, 4 + 0xC3, 4 + 0xA9]
    assert tok.decode(tok.encode("abcé")) == "abcé"
    assert _plamo2([("ab", -1.0), ("a", -0.5), ("b", -0.5)]).encode("ab") == [ab]  # ties keep the longer


def test_llama_cpps_test_vocabulary_hashes_five_byte_chunks():
    tok = Tokenizer({"tokenizer.ggml.model": "test", "tokenizer.ggml.tokens": [f"t{i}" for i in range(1000)]})
    text = "hello world"  # chunks 'hello', ' worl', 'd'
    want = [sum(b * 31 ** (len(c) - 1 - i) for i, b in enumerate(c)) % 2**64 % 1000
            for c in (b"hello", b" worl", b"d")]
    assert tok.encode(text, add_special=True) == want
    assert tok.decode([255, 16]) == "ff10"


def _raw_bpe(model, pieces, merges, pre, **extra):
    """A raw-UTF-8 BPE vocabulary (the whitespace/hybriddna kind): <0xXX> byte tokens, then pieces."""
    tokens = [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [6] * 256 + [1] * len(pieces)
    return Tokenizer({"tokenizer.ggml.model": model, "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
                      "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges, **extra})


def test_whitespace_model_splits_at_unicode_whitespace_and_keeps_case():
    tok = _raw_bpe("whitespace", ["a", "b", "ab", "A", "B", "AB"], ["a b", "A B"], "whitespace")
    a, b, ab, A, B, AB = range(256, 262)
    assert tok.encode("ab\u3000AB  a\tb") == [ab, AB, a, b]
    lower = _raw_bpe("whitespace", ["a", "b", "ab"], ["a b"], "whitespace",
                     **{"tokenizer.ggml.normalizer.lowercase": True})
    assert lower.encode("AB") == [258]
    assert tok.encode("é") == [0xC3, 0xA9]  # no piece: its UTF-8 bytes as <0xXX> tokens


def test_hybriddna_encodes_dna_as_six_mers():
    kmers = ["ACGTAC\ue000", "GTAAAA\ue000"]
    tok = _raw_bpe("hybriddna", ["h", "i", "hi", "<dna>", "</dna>", "<oov>", *kmers], ["h i"], "whitespace")
    hi, dna, end, oov, k1, k2 = 258, 259, 260, 261, 262, 263
    assert tok.encode("hi<dna>acgtacGT</dna>hi") == [hi, dna, k1, k2, end, hi]
    assert tok.encode("<dna>NNNNNN") == [dna, oov]
    assert tok.token_text(k1) == "ACGTAC"  # the marker is only there to keep ids apart
