"""Hostile HF model files: every refusal is typed and names the file, the key or the tensor."""

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

import pantheon
from pantheon.errors import (AbsurdValue, GGUFError, MissingKey, MissingTensor, TruncatedFile,
                             UnsupportedArchitecture, UnsupportedTensorType)
from pantheon.hf.names import UnknownTensor
from pantheon.hf.tensors import open_safetensors
from pantheon.serve.fit import estimate
from tests.pantheon.hf.tinyhf import make_hf, write_gguf


def _raw(path, header, data=b""):
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def test_views_share_the_file_map(tmp_path):
    save_file({"a": np.arange(12, dtype=np.float32).reshape(3, 4)}, str(tmp_path / "m.safetensors"))
    t = open_safetensors(tmp_path / "m.safetensors")["a"]
    assert t.shape == (3, 4) and t.raw.shape == (3, 16) and not t.raw.flags.writeable
    assert t.raw.view(np.float32).tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()


@pytest.mark.parametrize("header,data,error,words", [
    ({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, UnsupportedTensorType, "I32"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, AbsurdValue, "needs 12 bytes"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, TruncatedFile, "ends at data byte 16"),
    ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, AbsurdValue, "shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, AbsurdValue, "data_offsets"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, AbsurdValue, "overlap"),
    ([1, 2], b"", AbsurdValue, "not an object"),
])
def test_bad_headers(tmp_path, header, data, error, words):
    with pytest.raises(error, match=words):
        open_safetensors(_raw(tmp_path / "m.safetensors", header, data))


def test_header_length_and_json(tmp_path):
    (tmp_path / "short").write_bytes(b"\1\0")
    with pytest.raises(TruncatedFile):
        open_safetensors(tmp_path / "short")
    (tmp_path / "huge").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(AbsurdValue, match="header length"):
        open_safetensors(tmp_path / "huge")
    (tmp_path / "notjson").write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(AbsurdValue, match="not UTF-8 JSON"):
        open_safetensors(tmp_path / "notjson")


def _edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    for k in [k for k, v in changes.items() if v is None]:
        del cfg[k]
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes,error,words", [
    ({"model_type": "mamba"}, UnsupportedArchitecture, "mamba"),
    ({"hidden_size": None}, MissingKey, "hidden_size"),
    ({"num_key_value_heads": 3}, AbsurdValue, "num_key_value_heads"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, GGUFError, "yarn"),
    ({"hidden_size": 32}, GGUFError, "shape"),
    ({"num_attention_heads": "four"}, AbsurdValue, "num_attention_heads"),
])
def test_bad_configs(tmp_path, changes, error, words):
    d, _, _ = make_hf(tmp_path / "m", "llama")
    _edit_config(d, **changes)
    with pytest.raises(error, match=words):
        pantheon.open_model(str(d), threads=1)


def test_missing_and_unknown_tensors(tmp_path):
    d, cfg, weights = make_hf(tmp_path / "m", "llama")
    extra = dict(weights, **{"model.layers.0.self_attn.o_proj.bias": np.zeros(64, np.float32)})
    save_file(extra, str(d / "model.safetensors"))
    with pytest.raises(UnknownTensor, match="o_proj.bias"):
        pantheon.open_model(str(d), threads=1)
    del weights["lm_head.weight"]
    save_file(weights, str(d / "model.safetensors"))
    with pytest.raises(MissingTensor, match="lm_head"):
        pantheon.open_model(str(d), threads=1)


def test_hostile_index(tmp_path):
    d, _, _ = make_hf(tmp_path / "m", "qwen2", shards=2)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    for shard, error in (("../../etc/passwd", "plain"), ("model-00002-of-00002.safetensors", "not in shard")):
        bad = dict(index, weight_map=dict(index["weight_map"], **{name: shard}))
        if error == "not in shard":
            bad["weight_map"][name] = "model-00001-of-00002.safetensors" if index["weight_map"][name].startswith(
                "model-00002") else "model-00002-of-00002.safetensors"
        (d / "model.safetensors.index.json").write_text(json.dumps(bad))
        with pytest.raises(GGUFError, match=error):
            pantheon.open_model(str(d), threads=1)


def test_layout_errors(tmp_path):
    d, _, _ = make_hf(tmp_path / "m", "llama")
    (d / "model.safetensors").rename(d / "weights.bin")
    with pytest.raises(GGUFError, match="neither"):
        pantheon.open_model(str(d), threads=1)
    with pytest.raises(GGUFError, match="config.json"):
        pantheon.open_model(str(tmp_path / "elsewhere.safetensors"), threads=1)
    with pytest.raises(GGUFError, match="GGUF file"):
        pantheon.open_model(str(tmp_path / "x.gguf"), config=str(d / "config.json"))


@pytest.mark.parametrize("model_type", ["qwen3_moe", "llama"])
def test_fit_reads_config_json(tmp_path, model_type):
    d, cfg, weights = make_hf(tmp_path / "m", model_type)
    g = write_gguf(tmp_path / "m.gguf", cfg, weights)
    hf_est, gguf_est = estimate(d, ctx=256, slots=2), estimate(g, ctx=256, slots=2)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert hf_est.kv_per_token == 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * hd * 2  # f16 K and V
    assert hf_est.ctx == 256 and hf_est.file_weights == gguf_est.file_weights
    assert hf_est.parts() == gguf_est.parts()
    assert estimate(d, quantize=True).weights < hf_est.weights
