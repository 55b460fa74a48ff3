"""Every vocabulary llama.cpp's source tree ships under models/: Pantheon's ids equal llama.cpp's."""

import pytest

from tests.pantheon.text.llama_vocabs import WITH_VECTORS, WITHOUT_VECTORS, llama_cases, llama_vocab


@pytest.mark.parametrize("name", WITH_VECTORS)
def test_ids_match_llama_cpp(name):
    tok = llama_vocab(name)
    wrong = [(text, want, got) for text, want in llama_cases(name)
             if (got := tok.encode(text, add_special=False, parse_special=False)) != want]
    assert not wrong, f"{len(wrong)} mismatches, first: {wrong[0]!r}"


@pytest.mark.parametrize("name", WITHOUT_VECTORS)
def test_vocabularies_without_vectors_open_and_round_trip(name):
    # llama.cpp ships no expected ids for these; they must still load and encode plain text losslessly.
    tok = llama_vocab(name)
    text = "Hello world! 123 日本語"
    ids = tok.encode(text, add_special=False)
    assert ids and all(0 <= i < tok.n_vocab for i in ids)
    decoded = tok.decode(ids)
    assert decoded.strip().lower() == text.lower() or decoded.replace(" ", "") == text.replace(" ", "")
