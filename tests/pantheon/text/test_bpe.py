"""pantheon.text.bpe and pantheon.text.pretokenize: byte alphabet, merge order, pre-tokenizer splits."""

import pytest

from pantheon.errors import GGUFError
from pantheon.text.pretokenize import split_words
from pantheon.text.pretokenizers import pre_tokenizer
from pantheon.text.bpe import BpeEncoder, byte_decode, byte_encode, parse_merges
from tests.pantheon.text.vocab_cases import vocab


def test_gpt2_vocabulary_starts_with_the_256_byte_characters():
    tok = vocab("gpt-2")
    decoded = [byte_decode(tok.token_text(i)) for i in range(256)]
    assert sorted(decoded) == [bytes([b]) for b in range(256)]


def test_byte_encode_round_trips_every_byte():
    text = bytes(range(256)).decode("latin-1")
    spelled = byte_encode(text)
    assert " " not in spelled and byte_decode(spelled) == text.encode("utf-8")


def _encoder(tokens, merges, pre="gpt-2"):
    return BpeEncoder({t: i for i, t in enumerate(tokens)}, parse_merges(merges), pre_tokenizer(pre))


def test_lowest_rank_merges_first():
    enc = _encoder(["a", "b", "c", "ab", "bc"], ["b c", "a b"])
    assert enc.encode("abc") == [0, 4]


def test_first_rank_of_a_repeated_merge_wins():
    assert parse_merges(["a b", "c d", "a b"]) == {"a b": 0, "c d": 1}


def test_ignore_merges_takes_whole_words_from_the_vocabulary():
    tok = vocab("llama-bpe")
    assert tok.pre.ignore_merges
    word = "\u0120Hello"
    assert tok.encode(" Hello", add_special=False) == [tok.token_to_id[word]]


@pytest.mark.parametrize("pre, text, words", [
    ("gpt-2", "Hello world's  3.14", ["Hello", " world", "'s", " ", " 3", ".", "14"]),
    ("llama-bpe", "12345 abc\n\n x", ["123", "45", " abc", "\n\n", " x"]),
    ("qwen2", "12345", ["1", "2", "3", "4", "5"]),
    # qwen35 keeps combining marks (\p{M}) inside words; qwen2 splits them off.
    ("qwen35", "re\u0301sume\u0301", ["re\u0301sume\u0301"]),
    ("qwen2", "re\u0301sume\u0301", ["re", "\u0301sume", "\u0301"]),
    ("default", "a+b==1234", ["a", "+", "b", "==", "123", "4"]),
])
def test_pre_tokenizer_splits(pre, text, words):
    assert split_words(text, pre_tokenizer(pre)) == words


def test_unknown_pre_tokenizer_is_refused():
    with pytest.raises(GGUFError, match="no-such"):
        pre_tokenizer("no-such")
