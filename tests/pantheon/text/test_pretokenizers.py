"""The pre-tokenizer table: every name llama.cpp accepts, each family's split of mixed text, and (where
llama.cpp's Python binding is importable) ids equal to llama.cpp's for every name."""

import functools
import warnings

import pytest

from pantheon.text.pretokenize import DIGIT_GROUPS, KIMI_K2, split_words, uses_categories, _compiled
from pantheon.text.pretokenizers import PRE_TOKENIZERS, pre_tokenizer
from pantheon.text.bpe import BpeEncoder
from pantheon.text.tokenizer import Tokenizer
from pantheon.gguf.file import open_gguf
from tests.pantheon.text.llama_vocabs import llama_vocab_path, write_vocab_gguf

# Every `tokenizer.ggml.pre` value llama.cpp 0.3.36's llama_vocab::impl::load accepts.
LLAMA_CPP_NAMES = sorted("""
a.x-4.0 afmoe bailingmoe bailingmoe2 bloom chameleon chatglm-bpe codeshell cohere2moe command-r dbrx
deepseek-coder deepseek-llm deepseek-r1-qwen deepseek-v3 default exaone exaone-moe exaone4 f2llmv2 falcon
falcon-h1 falcon3 gemma4 gigachat glm4 glm5 gpt-2 gpt-4o gpt3-finnish granite-docling
granite-embed-multi-311m granite-embed-multi-97m grok-2 hunyuan hunyuan-dense hy_v4 jais jais-2 jina-de
jina-es jina-v1-en jina-v2-code jina-v2-de jina-v2-es jina-v5-nano joyai-llm kanana2 kimi-k2 kormo laguna
lfm2 llada-moe llama-bpe llama-v3 llama3 llama4 megrez mellum mellum2 midm-2.0 minerva-7b minicpm5
minimax-m2 modern-bert mpt olmo phi-2 pixtral poro-chat qwen2 qwen35 refact roberta-bpe sarvam-moe
seed-coder smaug-bpe smollm solar-open spark2_5 stablelm2 starcoder superbpe talkie tekken tiny_aya
trillion ufakzeka viking whitespace youtu""".split())

# Scripts, digits, whitespace runs, emoji, a contraction and a combining mark in one string.
MIXED = "Hello WORLDwide 1234567 日本語テキスト 한국어 🤖🎉  x\n\n don'T e\u0301 Привет ٣٤٥ x²"


def test_the_table_holds_exactly_llama_cpps_names():
    assert sorted(PRE_TOKENIZERS) == LLAMA_CPP_NAMES


@pytest.mark.parametrize("name", LLAMA_CPP_NAMES)
def test_every_regex_compiles_cleanly_and_splits_losslessly(name):
    pre = pre_tokenizer(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. re's FutureWarning on a set that looks nested
        for expr in pre.exprs:
            if expr not in DIGIT_GROUPS and expr != KIMI_K2:  # hand-written splitters, as in llama.cpp
                _compiled(expr)
    assert "".join(split_words(MIXED, pre)) == MIXED


def test_only_category_regexes_run_on_the_collapsed_text():
    assert uses_categories(r"\s?\p{L}+") and not uses_categories("[\u4e00-\u9fa5]+")


@pytest.mark.parametrize("name, words", [
    ("deepseek-v3", ["Hello", " WORLDwide", " ", "123", "456", "7", " ", "日本語テキスト", " 한국어", " 🤖🎉",
                     " ", " x", "\n\n", " don", "'T"]),
    ("tekken", ["Hello", " WORLDwide", " ", "1", "2", "3", "4", "5", "6", "7", " 日本語テキスト", " 한국어",
                " 🤖🎉", " ", " x", "\n\n", " don", "'T"]),
    ("gpt-4o", ["Hello", " WORLDwide", " ", "123", "456", "7", " 日本語テキスト", " 한국어", " 🤖🎉", " ",
                " x", "\n\n", " don'T"]),
    ("bloom", ["Hello", " WORLDwide", " 1234567", " 日本語テキスト", " 한국어", " 🤖🎉", " ", " x", "\n\n",
               " don'T"]),
    ("viking", ["Hello", " WORLDwide", " ", "1", "2", "3", "4", "5", "6", "7", " 日本語テキスト", " 한국어",
                " 🤖🎉", " ", " x", "\n\n", " don'T"]),
    ("chameleon", ["Hello", " WORLDwide", " ", "1", "2", "3", "4", "5", "6", "7", " 日本語テキスト", " 한국어",
                   " 🤖🎉", "  ", "x", "\n", "\n", " don", "'", "T"]),
    # Kimi-K2 keeps Han apart from kana and takes contractions case-insensitively.
    ("kimi-k2", ["Hello", " WORLDwide", " ", "123", "456", "7", " ", "日本語", "テキスト", " 한국어", " 🤖🎉",
                 " ", " x", "\n\n", " don'T"]),
    # Digit groups of three from the right (AFMoE, Tiny Aya, SuperBPE).
    ("afmoe", ["Hello", " WORLDwide", " ", "1", "234", "567", " ", "日本語テキスト", " ", "한국어", " 🤖🎉",
               " ", " x", "\n\n", " don", "'T"]),
    ("tiny_aya", ["Hello", " WORLDwide", " ", "1", "234", "567", " 日本語テキスト", " 한국어", " 🤖🎉", " ",
                  " x", "\n\n", " don'T"]),
    ("superbpe", ["Hello WORLDwide ", "1", "234", "567", " 日本語テキスト 한국어 🤖🎉  x\n\n don'T"]),
    ("deepseek-coder", ["Hello", " WORLDwide", " ", "1", "2", "3", "4", "5", "6", "7", " ", "日本語テキスト",
                        " ", "한국어", " 🤖🎉 ", " x", "\n", "\n", " don", "'", "T"]),
    ("exaone-moe", ["Hello WORLDwide", " ", "1", "2", "3", "4", "5", "6", "7", " 日本語テキスト 한국어", " 🤖🎉",
                    " ", " x", "\n\n", " don", "'T"]),
    ("gemma4", ["Hello WORLDwide 1234567 日本語テキスト 한국어 🤖🎉  x", "\n\n", " don'T"]),
])
def test_family_splits(name, words):
    text = MIXED.split(" e\u0301")[0]
    assert split_words(text, pre_tokenizer(name)) == words


def _byte_level_meta(name):
    """llama.cpp's Llama 3 vocabulary (byte-level BPE) relabelled with pre-tokenizer `name`."""
    meta = dict(open_gguf(str(llama_vocab_path("llama-bpe"))).metadata)
    meta["tokenizer.ggml.pre"] = name
    return meta


BYTE_LEVEL = [n for n in LLAMA_CPP_NAMES if pre_tokenizer(n).byte_encode]


@functools.lru_cache(maxsize=1)
def _llama3():
    return Tokenizer(_byte_level_meta("llama-bpe"))


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_every_byte_level_family_encodes_mixed_text_losslessly(name):
    base = _llama3()  # one vocabulary and merge table, each family's splitter in front of it
    bpe = BpeEncoder(base.token_to_id, base._encoder.ranks, pre_tokenizer(name))
    ids = bpe.encode(MIXED)
    assert all(0 <= i < base.n_vocab for i in ids) and base.decode(ids) == MIXED


def test_relabelled_vocabulary_survives_a_gguf_round_trip(tmp_path):
    # The binding test below hands llama.cpp such a file: check the writing here, where it runs.
    meta = _byte_level_meta("deepseek-v3")
    write_vocab_gguf(tmp_path / "v.gguf", meta)
    back = open_gguf(str(tmp_path / "v.gguf")).metadata
    assert {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in back.items()} == {
        k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in meta.items()}


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_ids_match_llama_cpp_binding(name, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama.cpp's Python binding is not installed")
    meta = _byte_level_meta(name)
    write_vocab_gguf(tmp_path / f"{name}.gguf", meta)
    ref = llama_cpp.Llama(model_path=str(tmp_path / f"{name}.gguf"), vocab_only=True, verbose=False)
    want = ref.tokenize(MIXED.encode(), add_bos=False, special=False)
    assert Tokenizer(meta).encode(MIXED, add_special=False) == want


def test_superbpe_thousands_splitter_cuts_where_its_regex_matches():
    from pantheon.text.pretokenize import THOUSANDS, _WIDE, _regex_split, _thousands
    import random
    pattern = _compiled(THOUSANDS)[0]
    rng = random.Random(1)
    for _ in range(2000):
        text = "".join(rng.choice("0123456789a ٣²") for _ in range(rng.randint(1, 30)))
        bounds = sorted({0, len(text), *rng.sample(range(len(text) + 1), min(3, len(text)))})
        spans = list(zip(bounds, bounds[1:]))
        want = [s for s in _regex_split(text.translate(_WIDE), spans, pattern) if s[1] > s[0]]
        assert [s for s in _thousands(text, spans) if s[1] > s[0]] == want, (text, spans)


LONG_RUNS = {"digits": "7" * 20000, "cyrillic": "Я" * 20000, "spaces": " " * 20000 + "x", "punct": "!" * 20000,
             "marks": "a" + "\u0301" * 20000, "newlines": "\n \n" * 8000, "words": "a a " * 8000,
             "cases": "aA" * 10000}


@pytest.mark.parametrize("text", LONG_RUNS.values(), ids=LONG_RUNS.keys())
def test_long_runs_split_in_linear_time(text):
    # A prompt is hostile input: no family may backtrack quadratically on it (SuperBPE's digit
    # lookahead did, run as a regex).
    import time
    for name in LLAMA_CPP_NAMES:
        start = time.perf_counter()
        split_words(text, pre_tokenizer(name))
        assert time.perf_counter() - start < 3, name  # quadratic would take tens of seconds
