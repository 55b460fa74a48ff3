"""Every vocabulary llama.cpp's source tree ships under models/: Pantheon's ids equal llama.cpp's."""

import pytest

from tests.pantheon.text.llama_vocabs import (WITH_VECTORS, WITHOUT_VECTORS, llama_cases, llama_vocab,
                                             llama_vocab_path)


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


MIXED = "Hello WORLDwide 1234567 日本語テキスト 한국어 🤖🎉  x\n\n don'T e\u0301 Привет ٣٤٥ x²\t\t end  "


@pytest.mark.parametrize("name", WITH_VECTORS + WITHOUT_VECTORS)
def test_mixed_text_matches_llama_cpp_binding(name):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama.cpp's Python binding is not installed")
    ref = llama_cpp.Llama(model_path=str(llama_vocab_path(name)), vocab_only=True, verbose=False)
    tok = llama_vocab(name)
    for add_special in (False, True):
        want = ref.tokenize(MIXED.encode(), add_bos=add_special, special=False)
        assert tok.encode(MIXED, add_special=add_special) == want
