"""config_from_metadata: hostile hyper-parameters are typed refusals, never OverflowError or TypeError."""

import math

import numpy as np
import pytest

from pantheon.errors import AbsurdValue, GGUFError
from pantheon.gguf.config import config_from_metadata

BASE = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.block_count": 2,
        "llama.attention.head_count": 4, "llama.vocab_size": 100}


def test_a_plain_config_builds():
    c = config_from_metadata(BASE)
    assert (c.dim, c.n_layer, c.n_head, c.n_vocab) == (64, 2, 4, 100)


@pytest.mark.parametrize("key, value", [
    ("llama.embedding_length", math.inf), ("llama.embedding_length", math.nan), ("llama.embedding_length", 64.5),
    ("llama.block_count", "2"), ("llama.block_count", True), ("llama.attention.head_count", np.array([4])),
    ("llama.vocab_size", -math.inf), ("llama.context_length", 1e300),
    ("llama.attention.layer_norm_rms_epsilon", math.nan), ("llama.rope.freq_base", math.inf),
    ("llama.rope.freq_base", -1.0), ("general.architecture", ["llama"]),
])
def test_non_finite_or_mistyped_values_are_typed_refusals(key, value):
    """The issue's 107-byte GGUF with FLOAT32 inf embedding_length killed the supervisor (OverflowError)."""
    with pytest.raises(GGUFError) as err:
        config_from_metadata(dict(BASE, **{key: value}))
    assert key.split(".")[-1] in str(err.value) or isinstance(err.value, AbsurdValue)


@pytest.mark.parametrize("code, pooling", [(None, ""), (0, "none"), (1, "mean"), (2, "cls"), (3, "last"), (4, "rank")])
def test_pooling_type_reads_llama_cpps_enum(code, pooling):
    meta = BASE if code is None else dict(BASE, **{"llama.pooling_type": code})
    assert config_from_metadata(meta).pooling == pooling


@pytest.mark.parametrize("code", [5, -2, 1.5, "mean"])
def test_an_unknown_pooling_type_is_a_typed_refusal(code):
    with pytest.raises(AbsurdValue, match="pooling_type"):
        config_from_metadata(dict(BASE, **{"llama.pooling_type": code}))
