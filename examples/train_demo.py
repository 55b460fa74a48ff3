"""Train and export Pantheon's bundled demo model: a tiny llama on CPython's pydoc topics.

Run from the repository root (CPU only, torch needed at build time only):

    nice -n 19 python examples/train_demo.py --steps 360 --out pantheon/demo/pantheon-demo.gguf

Inputs: the text of `pydoc_data.topics` (shipped with CPython) and the llama SPM vocabulary in
../shared/vocab/ggml-vocab-llama-spm.gguf (`--vocab`), from which a corpus-specific subset is kept.
See docs/demo-model.md for the settings and the measured losses.
"""

import argparse
import collections
import copy
import math
import pathlib
import random
import sys
import time
from dataclasses import dataclass

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from torch import nn
from torch.nn import functional as F

import pantheon
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.gguf.file import open_gguf
from pantheon.engine.sampler import SamplingParams
from pantheon.text.tokenizer import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_VOCAB = ROOT.parent / "shared" / "vocab" / "ggml-vocab-llama-spm.gguf"
DEFAULT_OUT = pathlib.Path(__file__).resolve().parent / "pantheon-demo.gguf"
N_SPECIAL_AND_BYTES = 3 + 256  # <unk> <s> </s> then <0x00>..<0xFF>, ids 0..258 in llama's vocabulary
# The demo model is a plain language model with no instruction tuning: a "User:/Assistant:" frame it
# never saw makes it emit noise, so its template lays the turns out as lines of plain text and the
# generation simply continues the last one. (Chat templates render with trim_blocks, as Hugging Face
# does, so the newline right after the if-tag is dropped: turns are separated by one newline.)
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ m['content'] }}{% if not loop.last %}\n\n{% endif %}"
    "{% endfor %}")


@dataclass(frozen=True)
class Settings:
    n_vocab: int = 4096
    dim: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_head_kv: int = 4
    n_ff: int = 768
    n_ctx: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    batch: int = 8
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 30
    weight_decay: float = 0.1
    val_every: int = 8  # every val_every-th topic (sorted by name) is held out


# ---- corpus and vocabulary ------------------------------------------------------------------------


def corpus():
    """[(topic, text)] of pydoc_data.topics, sorted by topic name."""
    from pydoc_data.topics import topics

    return sorted(topics.items())


def load_vocab(path):
    """Metadata of the shared llama SPM vocabulary; exits with a message when it is absent."""
    if not path.is_file():
        sys.exit(f"error: the llama SPM vocabulary {path} is absent; it is a build-time input "
                 "(llama.cpp's models/ggml-vocab-llama-spm.gguf), pass it with --vocab")
    return open_gguf(path).metadata


def merge_tree(piece, scores_by_text):
    """Every intermediate symbol SPM builds on its way from the characters of `piece` to its result."""
    syms, made = list(piece), set(piece)
    while len(syms) > 1:
        pairs = [(scores_by_text[a + b], -i) for i, (a, b) in enumerate(zip(syms, syms[1:]))
                 if a + b in scores_by_text]
        if not pairs:
            break
        i = -max(pairs)[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
        made.add(syms[i])
    return made


def select_vocab(meta, texts, size):
    """Ids kept from the full vocabulary: specials, bytes, then the pieces the corpus uses most,
    each with the symbols SPM merges through to reach it, so that every kept piece stays reachable."""
    full = Tokenizer.from_metadata(meta)
    counts = collections.Counter(t for text in texts for t in full.encode(text, add_special=False))
    tokens, scores = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"]
    scores_by_text = {t: float(scores[i]) for i, t in enumerate(tokens) if i >= N_SPECIAL_AND_BYTES}
    kept = set(range(N_SPECIAL_AND_BYTES))
    for tid, _ in counts.most_common():
        need = {full.token_to_id[s] for s in merge_tree(tokens[tid], scores_by_text) if s in scores_by_text}
        if len(kept | need) > size:
            continue
        kept |= need
    return sorted(kept)


def subset_metadata(meta, kept):
    """Tokenizer metadata of the kept ids (original order, scores and token types)."""
    idx = np.asarray(kept)  # [n_vocab]
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": [meta["tokenizer.ggml.tokens"][i] for i in kept],
        "tokenizer.ggml.scores": np.asarray(meta["tokenizer.ggml.scores"], np.float32)[idx],  # [n_vocab]
        "tokenizer.ggml.token_type": np.asarray(meta["tokenizer.ggml.token_type"], np.int32)[idx],  # [n_vocab]
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }


def token_streams(tok, docs, val_every):
    """(train, val) int64 token arrays: each topic is <s> text </s>; every val_every-th topic is val."""
    train, val = [], []
    for i, (_, text) in enumerate(docs):
        ids = tok.encode(text) + [tok.eos_id]
        (val if i % val_every == val_every - 1 else train).extend(ids)
    return np.asarray(train, np.int64), np.asarray(val, np.int64)  # [n_train], [n_val]


# ---- the model (llama.cpp's `llama` graph, in torch) ----------------------------------------------


def rope(x, cos, sin):
    """x [B, H, T, hd] rotated as llama.cpp does for `llama` (NORM): interleaved pairs (0,1), (2,3), ..."""
    a, b = x[..., 0::2], x[..., 1::2]  # [B, H, T, hd/2] x2
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)  # [B, H, T, hd]


class Block(nn.Module):
    """One llama block: pre-norm grouped-query attention, then a pre-norm SwiGLU FFN."""

    def __init__(self, s):
        super().__init__()
        self.s, hd = s, s.dim // s.n_head
        self.attn_norm, self.ffn_norm = nn.RMSNorm(s.dim, eps=s.norm_eps), nn.RMSNorm(s.dim, eps=s.norm_eps)
        self.wq = nn.Linear(s.dim, s.n_head * hd, bias=False)
        self.wk, self.wv = (nn.Linear(s.dim, s.n_head_kv * hd, bias=False) for _ in range(2))
        self.wo = nn.Linear(s.n_head * hd, s.dim, bias=False)
        self.gate, self.up = (nn.Linear(s.dim, s.n_ff, bias=False) for _ in range(2))
        self.down = nn.Linear(s.n_ff, s.dim, bias=False)

    def attention(self, h, cos, sin):
        b, t, _ = h.shape
        q = rope(self.wq(h).view(b, t, self.s.n_head, -1).transpose(1, 2), cos, sin)  # [B, H, T, hd]
        k = rope(self.wk(h).view(b, t, self.s.n_head_kv, -1).transpose(1, 2), cos, sin)  # [B, KV, T, hd]
        v = self.wv(h).view(b, t, self.s.n_head_kv, -1).transpose(1, 2)  # [B, KV, T, hd]
        g = self.s.n_head // self.s.n_head_kv  # query head i reads KV head i // g, as in llama.cpp
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # [B, H, T, hd] x2
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, hd]
        return self.wo(a.transpose(1, 2).reshape(b, t, -1))  # [B, T, dim]

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attn_norm(x), cos, sin)  # [B, T, dim]
        h = self.ffn_norm(x)  # [B, T, dim]
        return x + self.down(F.silu(self.gate(h)) * self.up(h))  # [B, T, dim]


class Llama(nn.Module):
    """Token embedding, blocks, final norm; the output projection is tied to the embedding."""

    def __init__(self, s):
        super().__init__()
        self.embd = nn.Embedding(s.n_vocab, s.dim)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.n_layer))
        self.norm = nn.RMSNorm(s.dim, eps=s.norm_eps)
        hd = s.dim // s.n_head
        inv = s.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd/2]
        theta = torch.arange(s.n_ctx, dtype=torch.float64)[:, None] * inv[None, :]  # [n_ctx, hd/2]
        self.register_buffer("cos", theta.cos().float(), persistent=False)  # [n_ctx, hd/2]
        self.register_buffer("sin", theta.sin().float(), persistent=False)  # [n_ctx, hd/2]

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embd(ids)  # [B, T, dim]
        for blk in self.blocks:
            x = blk(x, self.cos[:t], self.sin[:t])  # [B, T, dim]
        return self.norm(x) @ self.embd.weight.T  # [B, T, n_vocab]


def init_weights(model, s):
    """GPT-2 style init: N(0, 0.02), residual projections scaled down by depth."""
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * s.n_layer) if name.endswith(("wo.weight", "down.weight")) else 0.02
            nn.init.normal_(p, std=std)


# ---- training -------------------------------------------------------------------------------------


def lr_at(step, steps, s):
    """Linear warmup, then cosine decay from lr to min_lr."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    frac = (step - s.warmup) / max(1, steps - s.warmup)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + math.cos(math.pi * frac))


def batch(stream, s, rng):
    """(inputs, targets) int64 [batch, n_ctx] from random windows of `stream`."""
    starts = rng.integers(0, len(stream) - s.n_ctx - 1, size=s.batch)  # [batch]
    rows = np.stack([stream[i:i + s.n_ctx + 1] for i in starts])  # [batch, n_ctx + 1]
    return torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:])  # [batch, n_ctx] x2


def loss_of(model, x, y, reduction="mean"):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction=reduction)


def evaluate(model, stream, s):
    """Mean cross-entropy over consecutive non-overlapping windows of `stream`."""
    n = (len(stream) - 1) // s.n_ctx
    x = torch.from_numpy(stream[:n * s.n_ctx].reshape(n, s.n_ctx))  # [n, n_ctx]
    y = torch.from_numpy(stream[1:n * s.n_ctx + 1].reshape(n, s.n_ctx))  # [n, n_ctx]
    model.eval()
    with torch.no_grad():
        total = sum(float(loss_of(model, x[i:i + s.batch], y[i:i + s.batch], "sum")) for i in range(0, n, s.batch))
    model.train()
    return total / (n * s.n_ctx)


def optimizer(model, s):
    """AdamW; norm gains are not decayed."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                              {"params": other, "weight_decay": 0.0}], lr=s.lr, betas=(0.9, 0.95))


def train(model, train_ids, val_ids, s, steps, seed):
    """AdamW with warmup + cosine; prints the loss curve; returns (final train loss, val loss)."""
    rng, opt, t0 = np.random.default_rng(seed), optimizer(model, s), time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, s)
        loss = loss_of(model, *batch(train_ids, s, rng))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step, steps, s):.2e}  "
                  f"{time.time() - t0:6.0f}s", flush=True)
    return evaluate(model, train_ids, s), evaluate(model, val_ids, s)


# ---- export and verification ----------------------------------------------------------------------


def gguf_tensors(model, s):
    """{llama.cpp tensor name: float32 array}; no q/k permutation, as the torch rope is already llama.cpp's."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["embd.weight"], "output_norm.weight": sd["norm.weight"]}
    names = {"attn_norm": "attn_norm", "ffn_norm": "ffn_norm", "wq": "attn_q", "wk": "attn_k",
             "wv": "attn_v", "wo": "attn_output", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    for i in range(s.n_layer):
        for ours, theirs in names.items():
            out[f"blk.{i}.{theirs}.weight"] = sd[f"blocks.{i}.{ours}.weight"]
    return out


def stored(array):
    """(raw data, ggml type) as written: Q8_0 for matrices, F32 for norm vectors."""
    if array.ndim == 2:
        return gguf.quants.quantize(array, Q.Q8_0), Q.Q8_0
    return array.astype(np.float32), Q.F32


def write_gguf(path, model, s, tok_meta):
    """Write the model in llama.cpp's `llama` layout with its tokenizer."""
    w = gguf.GGUFWriter(str(path), "llama")
    write_hparams(w, s)
    write_tokenizer(w, tok_meta)
    for name, array in gguf_tensors(model, s).items():
        data, qtype = stored(array)
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_hparams(w, s):
    w.add_name("pantheon-demo")
    w.add_description("Pantheon's demo model: a tiny llama trained on CPython's pydoc topics (examples/train_demo.py)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_vocab_size(s.n_vocab)
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(s.dim)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_dimension_count(s.dim // s.n_head)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.norm_eps)


def write_tokenizer(w, meta):
    w.add_tokenizer_model(meta["tokenizer.ggml.model"])
    w.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_scores(meta["tokenizer.ggml.scores"].tolist())
    w.add_token_types(meta["tokenizer.ggml.token_type"].tolist())
    w.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(meta["tokenizer.ggml.unknown_token_id"])
    w.add_add_bos_token(meta["tokenizer.ggml.add_bos_token"])
    w.add_add_eos_token(meta["tokenizer.ggml.add_eos_token"])
    w.add_chat_template(meta["tokenizer.chat_template"])


def as_stored(model, s):
    """A copy of `model` whose weights are exactly what the GGUF holds (Q8_0 round trip)."""
    twin = copy.deepcopy(model)
    sd = twin.state_dict()
    for key, value in sd.items():
        if value.dim() == 2:
            q = gguf.quants.quantize(value.numpy(), Q.Q8_0)  # [rows, row_bytes]
            sd[key] = torch.from_numpy(gguf.quants.dequantize(q, Q.Q8_0).reshape(value.shape))  # [rows, cols]
    twin.load_state_dict(sd)
    return twin


def verify(path, model, s, sequences):
    """Max |Pantheon logits - torch logits| over `sequences`, torch using the stored (Q8_0) weights."""
    pm, twin, worst = pantheon.open_model(path, threads=1), as_stored(model, s).eval(), 0.0
    for ids in sequences:
        with torch.no_grad():
            ref = twin(torch.tensor([ids]))[0].numpy()  # [T, n_vocab]
        worst = max(worst, float(np.abs(pm.logits(ids) - ref).max()))
    return worst


def sample(path, prompt, n):
    """Greedy continuation of `prompt` by Pantheon's engine: the check that the exported file works."""
    model = pantheon.open_model(path, threads=1)
    engine = Engine(model, EngineConfig(n_ctx=model.config.n_ctx_train))
    engine.add(Request(id=0, prompt=tuple(model.tokenizer.encode(prompt)), max_tokens=n,
                       params=SamplingParams(temperature=0.0)))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return model.tokenizer.decode(out)


# ---- entry point ----------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=360, help="optimizer steps (default 360)")
    p.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="GGUF to write")
    p.add_argument("--seed", type=int, default=0, help="seed of init and batch order (default 0)")
    p.add_argument("--vocab", type=pathlib.Path, default=DEFAULT_VOCAB, help="llama SPM vocabulary GGUF")
    return p.parse_args(argv)


def prepare(args, s):
    """(tokenizer metadata, train ids, val ids) for settings `s`."""
    docs = corpus()
    kept = select_vocab(load_vocab(args.vocab), [text for _, text in docs], s.n_vocab)
    assert len(kept) == s.n_vocab, len(kept)
    tok_meta = subset_metadata(load_vocab(args.vocab), kept)
    train_ids, val_ids = token_streams(Tokenizer.from_metadata(tok_meta), docs, s.val_every)
    print(f"corpus: {len(docs)} topics, {sum(len(t) for _, t in docs)} chars; vocab {len(kept)}; "
          f"tokens: {len(train_ids)} train, {len(val_ids)} val", flush=True)
    return tok_meta, train_ids, val_ids


def main(argv=None):
    args, s = parse_args(argv), Settings()
    torch.set_num_threads(1)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    tok_meta, train_ids, val_ids = prepare(args, s)
    model = Llama(s)
    init_weights(model, s)
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters; {args.steps} steps", flush=True)
    train_loss, val_loss = train(model, train_ids, val_ids, s, args.steps, args.seed)
    print(f"final: train loss {train_loss:.4f}  val loss {val_loss:.4f}", flush=True)
    write_gguf(args.out, model, s, tok_meta)
    probes = [list(val_ids[:64]), list(train_ids[1000:1100]), [1]]
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); max |logit diff| pantheon vs torch: "
          f"{verify(args.out, model, s, probes):.2e}")
    print(f"sample: The meaning of{sample(args.out, 'The meaning of', 20)!r}")


if __name__ == "__main__":
    main()
