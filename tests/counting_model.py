"""A tiny llama GGUF that counts: greedy decoding after token t always yields t + 1.

The transformer blocks add nothing (attn_output and ffn_down are zero), so the last hidden state is
the embedding of the current token, 8 * E[t] for a random unit vector E[t]. Row v of output.weight is
50 * E[v - 1], so the logit of t + 1 is 400 and every other logit is 400 * cos(E[t], E[v - 1]),
about 200 below it at worst over 4096 random 64-d vectors: no numeric path changes the argmax.
A stream for prompt [s] with max_tokens n is therefore exactly decode([s + 1, ..., s + n]); a token
duplicated, dropped or reordered anywhere changes that text, which makes this model the oracle of
the chaos soak.
"""

import numpy as np
from gguf import GGUFReader, GGUFWriter

from tests.ggufcraft import copy_field, write

DIM = 64
HEADS = 2
KV_HEADS = 2
FFN = 64
CONTEXT = 4096
EMBED_SCALE = 8.0
OUTPUT_SCALE = 50.0
TOKENIZER_PREFIX = "tokenizer."


def _copy_tokenizer(writer, source):
    for key, field in GGUFReader(str(source)).fields.items():
        if key.startswith(TOKENIZER_PREFIX):
            copy_field(writer, key, field)


def _tensors(vocab, rng):
    unit = rng.standard_normal((vocab, DIM)).astype(np.float32)  # [V, dim]
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)  # [V, dim] unit rows
    out = {"token_embd.weight": EMBED_SCALE * unit,  # [V, dim]
           "output_norm.weight": np.ones(DIM, np.float32),  # [dim]
           "output.weight": OUTPUT_SCALE * np.roll(unit, 1, axis=0)}  # [V, dim]: row v = 50 * E[(v - 1) % V]
    head = DIM // HEADS
    shapes = {"attn_q": (DIM, DIM), "attn_k": (KV_HEADS * head, DIM), "attn_v": (KV_HEADS * head, DIM),
              "ffn_gate": (FFN, DIM), "ffn_up": (FFN, DIM)}
    for name, shape in shapes.items():
        out[f"blk.0.{name}.weight"] = 0.1 * rng.standard_normal(shape).astype(np.float32)  # [out, in]
    out["blk.0.attn_output.weight"] = np.zeros((DIM, DIM), np.float32)  # [dim, dim]: attention adds nothing
    out["blk.0.ffn_down.weight"] = np.zeros((DIM, FFN), np.float32)  # [dim, ffn]: the FFN adds nothing
    out["blk.0.attn_norm.weight"] = np.ones(DIM, np.float32)  # [dim]
    out["blk.0.ffn_norm.weight"] = np.ones(DIM, np.float32)  # [dim]
    return out


def build(path, tokenizer_source, seed=0):
    """Write the counting model to `path`, its vocabulary copied from `tokenizer_source`; returns `path`."""
    vocab = len(GGUFReader(str(tokenizer_source)).fields["tokenizer.ggml.tokens"].contents())
    w = GGUFWriter(str(path), "llama")
    w.add_name("counting-llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(DIM)
    w.add_block_count(1)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(DIM // HEADS)
    w.add_vocab_size(vocab)
    w.add_file_type(0)
    _copy_tokenizer(w, tokenizer_source)
    return write(w, _tensors(vocab, np.random.default_rng(seed)), path)


def expected_ids(start, n):
    """What greedy decoding of prompt [start] yields, n tokens long."""
    return list(range(start + 1, start + n + 1))
