"""The model catalog: every family file loads, rows carry their KV math, bench rows append and load back."""

import shutil

import pytest

from pantheon.ctl import catalog
from pantheon.errors import UsageError
from pantheon.gguf.config import ARCHITECTURES


def test_every_family_loads_and_names_an_architecture_pantheon_runs():
    families = catalog.load()
    assert {f.arch for f in families.values()} <= set(ARCHITECTURES)
    for family in families.values():
        for row in family.models:
            assert row["heads"] % row["kv_heads"] == 0 and row["layers"] > 0, row["name"]


def test_find_by_repo_name_then_by_model_type():
    families = catalog.load()
    family, row = catalog.find(families, ["bartowski/Qwen2.5-7B-Instruct-GGUF"])
    assert (family.arch, row["name"], row["kv_heads"]) == ("qwen2", "Qwen2.5-7B", 4)
    family, row = catalog.find(families, ["someone/unknown"], "qwen3_moe")
    assert family.arch == "qwen3moe" and row is None
    assert catalog.find(families, ["someone/unknown"]) == (None, None)


def test_config_json_rows_match_the_catalog():
    config = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "hidden_size": 4096, "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960}
    row = catalog.row_from_config_json(config, "x")
    _, known = catalog.find(catalog.load(), ["Qwen3-8B"])
    assert catalog.kv_bytes_per_token(row, 4) == catalog.kv_bytes_per_token(known, 4) == 2 * 36 * 8 * 128 * 4
    assert catalog.row_from_config_json({"hidden_size": 8}, "x") is None


def test_measured_rows_append_and_load_back(tmp_path):
    shutil.copy(catalog.CATALOG_DIR / "qwen3.toml", tmp_path / "qwen3.toml")
    family = catalog.load(tmp_path)["qwen3"]
    catalog.append_measured(family, {"model": 'q "3"', "streams": 2, "tg_tps": 12.5})
    again = catalog.load(tmp_path)["qwen3"]
    assert again.measured[-1]["model"] == 'q "3"' and again.measured[-1]["tg_tps"] == 12.5
    assert len(again.models) == len(family.models)


def test_a_malformed_catalog_is_refused_by_file(tmp_path):
    (tmp_path / "bad.toml").write_text('arch = "llama"\n[[model]]\nname = "x"\n')
    with pytest.raises(UsageError, match="bad.toml: model #0 lacks"):
        catalog.load(tmp_path)
