"""DRY's breakers as token sequences, on a real vocabulary (llama 3's BPE, from ../shared)."""

import pytest

import pantheon
from pantheon.text import dry_breakers
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def tok():
    return pantheon.open_tokenizer(str(shared_path("vocab", "ggml-vocab-llama-bpe.gguf")))


def test_every_token_holding_a_default_breaker_is_a_head_without_a_tail(tok):
    found = dry_breakers.breakers(tok)
    heads = {head for head, tail in found}
    assert all(tail == () for _, tail in found)  # one-character breakers never need a tail
    holding = {tid for tid in range(tok.n_vocab)
               if any(b.encode() in tok.token_bytes(tid, special=True) for b in dry_breakers.DEFAULT)}
    assert heads == holding and len(heads) > 1000
    assert {198, 25, 9} <= heads and 15339 not in heads  # "\n", ":", "*" are; "hello" is not


def test_a_token_ending_with_a_breakers_start_carries_the_rest_as_its_tail(tok):
    found = set(dry_breakers.breakers(tok, ["User:"]))
    assert (1502, tuple(tok.encode(":", add_special=False))) in found  # "User" then ":"
    assert (3642, tuple(tok.encode("er:", add_special=False))) in found  # "Us" then "er:"
    assert all(head != 15339 for head, _ in found)


def test_lists_are_cached_per_tokenizer_and_bounded(tok):
    assert dry_breakers.breakers(tok, ["\n"]) is dry_breakers.breakers(tok, ("\n",))
    for k in range(dry_breakers.MAX_LISTS + 2):
        dry_breakers.breakers(tok, [f"#{k}"])
    assert len(dry_breakers._cache[tok]) <= dry_breakers.MAX_LISTS


def test_an_empty_breaker_is_skipped_and_a_long_one_cut(tok):
    assert dry_breakers.breakers(tok, [""]) == ()
    long = dry_breakers.breakers(tok, ["x" * 100])
    assert long == dry_breakers.breakers(tok, ["x" * dry_breakers.MAX_BYTES])
