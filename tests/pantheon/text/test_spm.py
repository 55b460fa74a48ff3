"""pantheon.text.spm: llama.cpp's SPM merge order, whitespace escape and byte fallback."""

from pantheon.text.spm import SpmEncoder, byte_token_text, escape_whitespace
from tests.pantheon.text.vocab_cases import vocab


def _encoder(tokens, scores):
    return SpmEncoder({t: i for i, t in enumerate(tokens)}, scores, unk_id=0)


def test_highest_score_merges_first():
    # "abc": bigrams "ab" (score -2) and "bc" (score -1); "bc" wins, leaving "a" + "bc".
    enc = _encoder(["<unk>", "a", "b", "c", "ab", "bc"], [0, -5, -5, -5, -2, -1])
    assert enc.encode("abc") == [1, 5]


def test_equal_scores_merge_leftmost_first():
    enc = _encoder(["<unk>", "a", "b", "c", "ab", "bc"], [0, -5, -5, -5, -1, -1])
    assert enc.encode("abc") == [4, 3]


def test_merges_continue_on_merged_symbols():
    enc = _encoder(["<unk>", "a", "b", "c", "ab", "abc"], [0, -5, -5, -5, -1, -3])
    assert enc.encode("abc") == [5]


def test_unknown_characters_fall_back_to_byte_tokens():
    tokens = ["<unk>", "a"] + [byte_token_text(b) for b in range(256)]
    enc = _encoder(tokens, [0.0] * len(tokens))
    raw = "\u00e9".encode("utf-8")
    assert enc.encode("a\u00e9") == [1] + [tokens.index(f"<0x{b:02X}>") for b in raw]


def test_whitespace_escape():
    assert escape_whitespace(" a  b") == "\u2581a\u2581\u2581b"


def test_emoji_becomes_its_utf8_bytes_in_llama_vocab():
    tok = vocab("llama-spm")
    ids = tok.encode("\U0001F999", add_special=False)  # llama emoji, not in the vocabulary
    # "▁" first (the SPM space prefix), then one <0xNN> token per UTF-8 byte.
    assert [tok.token_text(i) for i in ids] == ["\u2581"] + [
        f"<0x{b:02X}>" for b in "\U0001F999".encode("utf-8")]
