"""The bundled demo model: present, small, a llama GGUF whose greedy output is English words."""

import re

import numpy as np
import pytest

import pantheon
from pantheon.demo import demo_model_path
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.gguf.file import open_gguf
from pantheon.engine.sampler import SamplingParams
from tests.conftest import shared_path

MAX_BYTES = 10 * 1024 * 1024
# Share of generated words that must be words of the training corpus; uniformly random tokens of
# the same vocabulary score far below it (test_word_check_rejects_noise).
MIN_REAL = 0.8


@pytest.fixture(scope="module")
def model():
    return pantheon.open_model(str(demo_model_path()), threads=1)


@pytest.fixture(scope="module")
def english():
    """Lower-cased words of the training corpus (the Python documentation shipped with CPython)."""
    from pydoc_data.topics import topics

    return {w.lower() for text in topics.values() for w in re.findall(r"[A-Za-z]+", text)}


def words_of(text):
    """Whitespace-separated words, lower-cased, surrounding punctuation stripped, empty ones dropped."""
    words = (re.sub(r"^[^A-Za-z]+|[^A-Za-z]+$", "", w).lower() for w in text.split())
    return [w for w in words if w]


def real_share(text, english):
    """Share of the words of `text` that are corpus words (0 when there are none)."""
    words = words_of(text)
    return sum(w in english for w in words) / len(words) if words else 0.0


def greedy(model, prompt, n):
    engine = Engine(model, EngineConfig(n_ctx=model.config.n_ctx_train))
    engine.add(Request(0, tuple(model.tokenizer.encode(prompt)), max_tokens=n,
                       params=SamplingParams(temperature=0.0)))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return out


def test_path_is_the_bundled_file():
    path = demo_model_path()
    assert path.name == "pantheon-demo.gguf" and path.parent.name == "demo"
    assert path.is_file()
    assert 0 < path.stat().st_size < MAX_BYTES


def test_opens_as_llama(model):
    c = model.config
    assert c.arch == "llama" and not c.neox_rope
    assert c.n_vocab == model.tokenizer.n_vocab
    assert c.n_layer >= 1 and c.n_ctx_train >= 64


def test_tokenizer_is_a_subset_of_llama_spm(model):
    ref = open_gguf(str(shared_path("vocab", "ggml-vocab-llama-spm.gguf"))).metadata
    ref_ids = {t: i for i, t in enumerate(ref["tokenizer.ggml.tokens"])}
    meta = model.gguf.metadata
    ids = [ref_ids[t] for t in meta["tokenizer.ggml.tokens"]]  # KeyError: a piece llama lacks
    assert ids[:259] == list(range(259))  # <unk> <s> </s> and the 256 byte tokens
    np.testing.assert_array_equal(np.asarray(meta["tokenizer.ggml.scores"]),
                                  np.asarray(ref["tokenizer.ggml.scores"])[ids])
    np.testing.assert_array_equal(np.asarray(meta["tokenizer.ggml.token_type"]),
                                  np.asarray(ref["tokenizer.ggml.token_type"])[ids])


def test_tokenizer_round_trips_text(model):
    tok = pantheon.open_tokenizer(str(demo_model_path()))
    text = "The meaning of a name is given by its binding — café ✓"
    ids = tok.encode(text)
    assert ids[0] == tok.bos_id == 1
    assert tok.decode(ids) == " " + text  # SPM's space prefix, byte fallback for the rest
    assert len(tok.encode("the value of the object")) <= 7  # whole-word pieces, not bytes


def test_greedy_output_is_english(model, english):
    text = model.tokenizer.decode(greedy(model, "The meaning of", 20))
    assert len(set(words_of(text))) >= 5, text  # an untrained model repeats one word
    assert real_share(text, english) >= MIN_REAL, text


def test_word_check_rejects_noise(model, english):
    rng = np.random.default_rng(0)
    for _ in range(5):
        noise = model.tokenizer.decode(rng.integers(259, model.config.n_vocab, size=20))
        assert real_share(noise, english) < MIN_REAL, noise


def test_chat_template_renders(model):
    from pantheon.text.chat import ChatTemplate

    template = ChatTemplate.from_metadata(model.gguf.metadata)
    assert not template.is_default
    prompt = template.render([{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "What is a list?"}])
    assert prompt == "Be brief.\nWhat is a list?"
