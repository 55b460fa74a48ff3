"""ModelCard: a served file's family, parameters and quantization, checked against gguf-py's own reader."""

import os
import shutil

import gguf
import numpy as np
import pytest

from pantheon.serve.model_card import ModelCard, model_card
from pantheon.source import open_files
from tests.conftest import shared_path
from tests.ggufcraft import rewrite


def card_of(path, tensors=True):
    files, cfg = open_files(str(path), tensors=tensors)
    return model_card(files, cfg)


@pytest.mark.parametrize("name, quantization", [("qwen2-q8_0.gguf", "Q8_0"), ("llama-q4_0.gguf", "Q4_0")])
def test_a_gguf_card_agrees_with_gguf_py(name, quantization):
    path = shared_path("golden", name)
    reader = gguf.GGUFReader(str(path))
    card = card_of(path)
    assert card.family == reader.fields["general.architecture"].contents()
    assert card.parameters == sum(int(np.prod(t.shape)) for t in reader.tensors)
    assert (card.quantization, card.format, card.size) == (quantization, "gguf", os.path.getsize(path))
    assert card.modified.endswith("Z") and len(card.digest) == 64


def test_without_file_type_the_type_holding_most_bytes_names_it(tmp_path):
    path = tmp_path / "no-ftype.gguf"
    rewrite(shared_path("golden", "llama-q4_0.gguf"), path, drop_keys=("general.file_type",))
    assert "general.file_type" not in gguf.GGUFReader(str(path)).fields
    assert card_of(path).quantization == "Q4_0"


def test_the_digest_changes_when_the_file_is_replaced(tmp_path):
    path = tmp_path / "m.gguf"
    shutil.copy(shared_path("golden", "qwen2-q8_0.gguf"), path)
    before = card_of(path)
    assert card_of(path).digest == before.digest
    os.utime(path, ns=(1, 10**18))
    assert card_of(path).digest != before.digest and card_of(path).modified.startswith("2001-09-09")


def test_an_hf_directory_is_safetensors_and_sized_by_its_files(tmp_path):
    pytest.importorskip("tokenizers")
    from tests.pantheon.hf.tinyhf import make_hf

    path, _, _ = make_hf(tmp_path / "hf", "llama")
    card = card_of(path, tensors=False)
    assert card.format == "safetensors" and card.family == "llama" and card.parameters == 0
    assert card.size == sum(f.stat().st_size for f in path.iterdir() if f.is_file())


@pytest.mark.parametrize("n, shown", [(8_030_261_248, "8.0B"), (494_032_768, "494.03M"), (3_210, "3.21K"), (0, "")])
def test_parameter_size_is_printed_as_ollama_prints_it(n, shown):
    assert ModelCard("llama", n, "Q4_0", 0, "", "").parameter_size == shown
