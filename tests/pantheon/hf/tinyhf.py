"""Tiny HuggingFace model directories for tests, and the same weights written as llama.cpp would convert them.

Each architecture gets random weights (safetensors), a config.json, a real tokenizer.json built with
the `tokenizers` library, tokenizer_config.json and generation_config.json. `write_gguf` writes the
same weights under GGUF names with llama.cpp's conversion rules: llama-family q/k rows permuted from
HF's half-split order to interleaved pairs, stacked expert tensors, tied output dropped.
"""

import json

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

DIM, HEADS, KV_HEADS, FF, LAYERS = 64, 4, 2, 96, 2
EXPERTS, USED, FF_EXPERT = 4, 2, 64
CORPUS = ["Hello world! The quick brown fox jumps over the lazy dog.", "12345 67890 été 日本語 🙂",
          "def f(x):\n    return x * 2\n", "Pantheon serves many models at once."] * 4

# HF model_type -> (GGUF arch, llama.cpp permutes q/k, tokenizer style, extra config keys)
ARCHS = {
    "llama": ("llama", True, "bytelevel", {"tie_word_embeddings": False}),
    "mistral": ("llama", True, "spm", {"sliding_window": 4096}),
    "mixtral": ("llama", True, "spm", {"num_local_experts": EXPERTS, "num_experts_per_tok": USED}),
    "qwen2": ("qwen2", False, "bytelevel", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", False, "bytelevel", {"head_dim": 32, "tie_word_embeddings": True}),
    "qwen3_moe": ("qwen3moe", False, "bytelevel", {"head_dim": 32, "num_experts": EXPERTS,
                                                   "num_experts_per_tok": USED, "moe_intermediate_size": FF_EXPERT,
                                                   "norm_topk_prob": True, "decoder_sparse_step": 1,
                                                   "mlp_only_layers": []}),
    "phi3": ("phi3", False, "spm", {"partial_rotary_factor": 0.5}),
}
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def bytelevel_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok, {"bos_token": None, "eos_token": "<|im_end|>"}


def spm_tokenizer():
    """Llama-2-style: BPE with byte fallback over '▁'-escaped text, BOS added by the post-processor."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    merges = []
    for word in ("\u2581the", "\u2581Hello", "\u2581world", "\u2581fox"):
        for i in range(1, len(word)):
            left, right = word[:i], word[i]
            for piece in (left, right, left + right):
                vocab.setdefault(piece, len(vocab))
            merges.append((left, right))
    for ch in "abcdefghijklmnopqrstuvwxyz\u2581":
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return tok, {"bos_token": "<s>", "eos_token": "</s>"}


def _config(model_type, n_vocab):
    _, _, _, extra = ARCHS[model_type]
    cfg = {"model_type": model_type, "architectures": ["X"], "hidden_size": DIM, "num_hidden_layers": LAYERS,
           "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": FF,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512, "vocab_size": n_vocab,
           "torch_dtype": "float32", "tie_word_embeddings": False, "pad_token_id": None}
    cfg.update(extra)
    return cfg


def _head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def hf_weights(cfg, rng):
    """{HF name: float32 array} for `cfg`, random at a scale that keeps activations O(1)."""
    def rand(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)  # shape

    hd, mt = _head_dim(cfg), cfg["model_type"]
    q, kv = HEADS * hd, KV_HEADS * hd
    w = {"model.embed_tokens.weight": rand(cfg["vocab_size"], DIM) * 8,
         "model.norm.weight": (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32)}
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = rand(cfg["vocab_size"], DIM)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32)
        w[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32)
        if mt == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = rand(q + 2 * kv, DIM)
            w[p + "mlp.gate_up_proj.weight"] = rand(2 * FF, DIM)
            w[p + "mlp.down_proj.weight"] = rand(DIM, FF)
        else:
            for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                w[p + f"self_attn.{name}.weight"] = rand(rows, DIM)
                if mt == "qwen2":
                    w[p + f"self_attn.{name}.bias"] = (0.5 * rng.standard_normal(rows)).astype(np.float32)
        w[p + "self_attn.o_proj.weight"] = rand(DIM, q)
        if mt.startswith("qwen3"):
            w[p + "self_attn.q_norm.weight"] = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
            w[p + "self_attn.k_norm.weight"] = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
        w.update(_ffn(p, mt, rand))
    return w


def _ffn(p, mt, rand):
    if mt == "mixtral":
        w = {p + "block_sparse_moe.gate.weight": rand(EXPERTS, DIM) * 4}
        for e in range(EXPERTS):
            e_p = p + f"block_sparse_moe.experts.{e}."
            w.update({e_p + "w1.weight": rand(FF, DIM), e_p + "w3.weight": rand(FF, DIM), e_p + "w2.weight": rand(DIM, FF)})
        return w
    if mt == "qwen3_moe":
        w = {p + "mlp.gate.weight": rand(EXPERTS, DIM) * 4}
        for e in range(EXPERTS):
            e_p = p + f"mlp.experts.{e}."
            w.update({e_p + "gate_proj.weight": rand(FF_EXPERT, DIM), e_p + "up_proj.weight": rand(FF_EXPERT, DIM),
                      e_p + "down_proj.weight": rand(DIM, FF_EXPERT)})
        return w
    if mt == "phi3":
        return {}
    return {p + "mlp.gate_proj.weight": rand(FF, DIM), p + "mlp.up_proj.weight": rand(FF, DIM),
            p + "mlp.down_proj.weight": rand(DIM, FF)}


def to_dtype(a, dtype):
    """float32 -> stored array: F32 as is, F16 via numpy, BF16 as uint16 bit patterns (rounded to nearest even)."""
    if dtype == "F32":
        return a
    if dtype == "F16":
        return a.astype(np.float16)
    bits = a.view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # [...] bf16 bit patterns


def _save(weights, path, dtype, shards):
    """Write safetensors (BF16 via a header rewrite, since numpy has no bfloat16), sharded when shards > 1."""
    from safetensors.numpy import save_file  # here: make_gguf's users (the GPU device run) lack safetensors
    names = sorted(weights)
    groups = [names[i::shards] for i in range(shards)]
    files = [path / (f"model-{i + 1:05d}-of-{shards:05d}.safetensors" if shards > 1 else "model.safetensors")
             for i in range(shards)]
    for group, f in zip(groups, files):
        save_file({n: to_dtype(weights[n], dtype) for n in group}, str(f))
        if dtype == "BF16":
            _retag_bf16(f)
    if shards > 1:
        index = {"metadata": {}, "weight_map": {n: f.name for group, f in zip(groups, files) for n in group}}
        (path / "model.safetensors.index.json").write_text(json.dumps(index))


def _retag_bf16(f):
    raw = f.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = raw[8:8 + n].decode().rstrip().replace('"U16"', '"BF16"').encode()
    header += b" " * (-len(header) % 8)  # offsets are relative to the data, so only the length changes
    f.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + n:])


def make_hf(path, model_type, dtype="F32", shards=1, seed=0):
    """Write a tiny `model_type` HF directory at `path`; returns (path, {HF name: float32 weights as stored})."""
    path.mkdir(parents=True, exist_ok=True)
    tok, specials = (bytelevel_tokenizer if ARCHS[model_type][2] == "bytelevel" else spm_tokenizer)()
    tok.save(str(path / "tokenizer.json"))
    n_vocab = -(-tok.get_vocab_size() // 32) * 32 + 32  # padded past the tokenizer, as real checkpoints are
    cfg = _config(model_type, n_vocab)
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "tokenizer_config.json").write_text(json.dumps({**specials, "chat_template": TEMPLATE}))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [tok.token_to_id("<|endoftext|>")]}))
    weights = hf_weights(cfg, np.random.default_rng(seed))
    _save(weights, path, dtype, shards)
    stored = {n: _as_f32(to_dtype(a, dtype), dtype) for n, a in weights.items()}
    return path, cfg, stored


def make_gguf(path, model_type, n_vocab=256, seed=0):
    """A tiny `model_type` GGUF at `path` without a tokenizer (engine tests; needs neither tokenizers nor
    safetensors, so it also runs on a bare GPU machine)."""
    cfg = _config(model_type, n_vocab)
    return write_gguf(path, cfg, hf_weights(cfg, np.random.default_rng(seed)))


def _as_f32(a, dtype):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def interleave_rows(w, n_head):
    """HF's half-split q/k rows -> llama.cpp's interleaved order (what convert_hf_to_gguf does for llama)."""
    rows = w.shape[0]
    half = rows // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)  # [rows, ...]


def gguf_tensors(cfg, weights):
    """{GGUF name: float32 array} from HF weights, converted as llama.cpp does."""
    from pantheon.hf.names import gguf_name

    arch, permute, _, _ = ARCHS[cfg["model_type"]]
    out, experts = {}, {}
    for name, a in weights.items():
        g = gguf_name(name)
        if permute and g.endswith("attn_q.weight"):
            a = interleave_rows(a, HEADS)
        if permute and g.endswith("attn_k.weight"):
            a = interleave_rows(a, KV_HEADS)
        parts = g.split(".")
        if len(parts) == 5:  # blk.i.ffn_gate.e.weight -> stacked later
            experts.setdefault(f"blk.{parts[1]}.{parts[2]}_exps.weight", {})[int(parts[3])] = a
        else:
            out[g] = a
    for g, per in experts.items():
        out[g] = np.stack([per[e] for e in range(len(per))])  # [E, rows, cols]
    return out


def write_gguf(path, cfg, weights, dtype="F32"):
    """The GGUF llama.cpp's converter would write for this HF model (metadata for the engine only)."""
    arch = ARCHS[cfg["model_type"]][0]
    hd = _head_dim(cfg)
    w = GGUFWriter(str(path), arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(DIM)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(int(hd * cfg.get("partial_rotary_factor", 1.0)))
    w.add_vocab_size(cfg["vocab_size"])
    if "num_experts_per_tok" in cfg:
        w.add_expert_count(EXPERTS)
        w.add_expert_used_count(USED)
        if cfg["model_type"] == "qwen3_moe":
            w.add_expert_feed_forward_length(FF_EXPERT)
    qtype = {"F32": None, "F16": GGMLQuantizationType.F16, "BF16": GGMLQuantizationType.BF16}[dtype]
    for name, a in gguf_tensors(cfg, weights).items():
        if a.ndim == 1 or qtype is None:
            w.add_tensor(name, a.astype(np.float32))
        else:
            w.add_tensor(name, to_dtype(a, dtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
