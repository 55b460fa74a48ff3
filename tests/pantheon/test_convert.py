"""pantheon-convert: a torch state dict becomes a safetensors directory with the same logits.

Needs PyTorch (the `convert` extra); skipped with that reason where it is not installed."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import pantheon
from pantheon.convert import ConvertError, convert
from tests.pantheon.hf.tinyhf import HEADS, KV_HEADS, interleave_rows, make_hf

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install '.[convert]' (CPU wheel)")

PROMPT = [5, 17, 33, 2, 9, 100, 7, 8]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _state(weights):
    return {n: torch.from_numpy(a.copy()) for n, a in weights.items()}


def test_hf_state_dict_round_trip(tmp_path):
    hf, cfg, weights = make_hf(tmp_path / "hf", "qwen2", dtype="BF16")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save({"state_dict": {n: t.to(torch.bfloat16) for n, t in _state(weights).items()}}, ckpt / "model.pt")
    out = convert(str(ckpt / "model.pt"), str(tmp_path / "out"), config=str(hf / "config.json"),
                  text_dir=str(hf), shard_bytes=40_000)
    assert (tmp_path / "out" / "model.safetensors.index.json").is_file()  # sharded at 40 kB
    want = pantheon.open_model(str(hf), threads=1).logits(PROMPT)  # [S, V]
    got = pantheon.open_model(out, threads=1)
    assert got.weights.blocks[0].wq.qtype == 30  # BF16 kept
    np.testing.assert_array_equal(got.logits(PROMPT), want)
    assert got.tokenizer.encode("Hello") == pantheon.open_model(str(hf), threads=1).tokenizer.encode("Hello")


def test_meta_checkpoint_with_params_json(tmp_path):
    """Meta's names and interleaved q/k rows: converted to HF's half-split order, same logits as HF."""
    hf, cfg, weights = make_hf(tmp_path / "hf", "llama")
    meta = {"tok_embeddings.weight": weights["model.embed_tokens.weight"], "norm.weight": weights["model.norm.weight"],
            "output.weight": weights["lm_head.weight"]}
    names = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
             "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.up_proj": "feed_forward.w3",
             "mlp.down_proj": "feed_forward.w2", "input_layernorm": "attention_norm",
             "post_attention_layernorm": "ffn_norm"}
    for i in range(cfg["num_hidden_layers"]):
        for hf_part, meta_part in names.items():
            a = weights[f"model.layers.{i}.{hf_part}.weight"]
            if hf_part == "self_attn.q_proj":
                a = interleave_rows(a, HEADS)
            if hf_part == "self_attn.k_proj":
                a = interleave_rows(a, KV_HEADS)
            meta[f"layers.{i}.{meta_part}.weight"] = a
    ckpt = tmp_path / "meta"
    ckpt.mkdir()
    torch.save(_state(meta), ckpt / "consolidated.00.pth")
    (ckpt / "params.json").write_text(json.dumps({"dim": cfg["hidden_size"], "n_layers": cfg["num_hidden_layers"],
                                                  "n_heads": HEADS, "n_kv_heads": KV_HEADS, "norm_eps": 1e-5,
                                                  "vocab_size": -1, "max_seq_len": 512}))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "pantheon-convert"), str(ckpt / "consolidated.00.pth"),
                           "--out", str(tmp_path / "out"), "--tokenizer-dir", str(hf)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    want = pantheon.open_model(str(hf), threads=1).logits(PROMPT)  # [S, V]
    got = pantheon.open_model(str(tmp_path / "out"), threads=1).logits(PROMPT)  # [S, V]
    np.testing.assert_array_equal(got, want)


class Payload:
    """An object whose unpickling would need this module's code."""

    def __reduce__(self):
        return (os.getcwd, ())


def test_pickles_that_need_code_are_refused(tmp_path):
    torch.save({"w": torch.zeros(2), "evil": Payload()}, tmp_path / "bad.pt")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConvertError, match="execute code"):
        convert(str(tmp_path / "bad.pt"), str(tmp_path / "out"), config=str(tmp_path / "config.json"))
    assert not (tmp_path / "out").exists()


def test_not_a_state_dict_and_unknown_names(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pt")
    torch.save({"encoder.weird.weight": torch.zeros(2, 2)}, tmp_path / "odd.pt")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConvertError, match="not a state dict"):
        convert(str(tmp_path / "list.pt"), str(tmp_path / "o1"), config=str(tmp_path / "config.json"))
    with pytest.raises(ConvertError, match="encoder.weird.weight"):
        convert(str(tmp_path / "odd.pt"), str(tmp_path / "o2"), config=str(tmp_path / "config.json"))
