"""Opening a 600 MB model is zero-copy: resident memory grows by well under 10 % of it, in under a second."""

import struct
import time

import psutil
import pytest
from gguf import GGMLQuantizationType as QT

import pantheon
import pantheon.engine.model  # noqa: F401  imported up front: the code's own footprint (numba) is not the model's
from tests.pantheon.gguf.craft import VT, gguf_bytes, gstr, kv, kv_array, tinfo

DIM, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 2048, 22, 32, 4, 5632, 32000  # TinyLlama-1.1B's shape


def u32(key, value):
    return kv(key, VT.UINT32, struct.pack("<I", value))


def metadata():
    return [kv("general.architecture", VT.STRING, gstr("llama")), u32("llama.context_length", 2048),
            u32("llama.embedding_length", DIM), u32("llama.block_count", LAYERS),
            u32("llama.feed_forward_length", FFN), u32("llama.attention.head_count", HEADS),
            u32("llama.attention.head_count_kv", KV_HEADS),
            kv("llama.attention.layer_norm_rms_epsilon", VT.FLOAT32, struct.pack("<f", 1e-5)),
            kv_array("tokenizer.ggml.tokens", VT.STRING, [gstr(f"\u2581t{i}") for i in range(VOCAB)])]


def tensors():
    """(name, ne, qtype) of every tensor, ggml order ne = [cols, rows]."""
    kv_dim = DIM // HEADS * KV_HEADS
    out = [("token_embd.weight", [DIM, VOCAB], QT.Q4_0), ("output_norm.weight", [DIM], QT.F32),
           ("output.weight", [DIM, VOCAB], QT.Q4_0)]
    for i in range(LAYERS):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", [DIM], QT.F32), (p + "ffn_norm.weight", [DIM], QT.F32),
                (p + "attn_q.weight", [DIM, DIM], QT.Q4_0), (p + "attn_k.weight", [DIM, kv_dim], QT.Q4_0),
                (p + "attn_v.weight", [DIM, kv_dim], QT.Q4_0), (p + "attn_output.weight", [DIM, DIM], QT.Q4_0),
                (p + "ffn_gate.weight", [DIM, FFN], QT.Q4_0), (p + "ffn_up.weight", [DIM, FFN], QT.Q4_0),
                (p + "ffn_down.weight", [FFN, DIM], QT.Q4_0)]
    return out


def nbytes(ne, qtype):
    count = 1
    for n in ne:
        count *= n
    return count * 4 if qtype == QT.F32 else count // 32 * 18


def write_sparse_model(path):
    """Header for real, tensor data as a hole: the file is 600+ MB but costs no disk and no page reads."""
    infos, offset = [], 0
    for name, ne, qtype in tensors():
        infos.append(tinfo(name, ne, qtype, offset))
        offset += -(-nbytes(ne, qtype) // 32) * 32
    head = gguf_bytes(metadata(), infos)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return offset


@pytest.mark.parametrize("repack", [False, True])
def test_open_model_is_zero_copy_and_fast(tmp_path, repack):
    """From the file, and from its repacked sidecar once written (the first open writes it)."""
    path = tmp_path / "tiny-shape-q4_0.gguf"
    data_bytes = write_sparse_model(path)
    assert data_bytes > 600e6
    if repack:
        pantheon.open_model(str(path), threads=1, repack_dir=tmp_path / "rp")
    process = psutil.Process()
    rss = process.memory_info().rss
    started = time.perf_counter()
    model = pantheon.open_model(str(path), threads=1, repack=repack, repack_dir=tmp_path / "rp")
    seconds = time.perf_counter() - started
    grown = process.memory_info().rss - rss
    assert model.config.n_layer == LAYERS and model.weights.token_embd.rows == VOCAB
    assert grown < 0.03 * data_bytes, f"resident memory grew {grown / 1e6:.1f} MB for a {data_bytes / 1e6:.0f} MB model"
    assert seconds < 1.0, f"open_model took {seconds:.2f} s"
