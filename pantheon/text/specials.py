"""Special tokens as llama.cpp sees them: attributes, BOS/EOS/EOT ids, end-of-generation set, text partition."""

from dataclasses import dataclass

import numpy as np

from pantheon.errors import GGUFError

# llama_token_attr bits (llama.h).
UNKNOWN, UNUSED, NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 2, 4, 8, 16, 32
LSTRIP, RSTRIP = 128, 256

# tokenizer.ggml.token_type values (LLAMA_TOKEN_TYPE_*) -> attribute bits; anything else is undefined (0).
_TYPE_TO_ATTR = np.zeros(8, np.int32)  # [8]
_TYPE_TO_ATTR[1:7] = [NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE]

# Token texts llama.cpp (llama-vocab.cpp, load) recognises, in the priority order used here.
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# The roles a fill-in-the-middle prompt is built from: prefix, suffix and middle marks, and the file separator.
FIM_ROLES = ("fim_pre", "fim_suf", "fim_mid", "fim_sep")
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<｜end▁of▁sentence｜>", "[e~[")
ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")

_C_SPACE = " \t\n\v\f\r"

_ID_KEYS = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
            "eot": "tokenizer.ggml.eot_token_id", "eom": "tokenizer.ggml.eom_token_id",
            "unk": "tokenizer.ggml.unknown_token_id", "pad": "tokenizer.ggml.padding_token_id",
            "fim_pre": "tokenizer.ggml.fim_pre_token_id", "fim_suf": "tokenizer.ggml.fim_suf_token_id",
            "fim_mid": "tokenizer.ggml.fim_mid_token_id",
            "fim_pad": "tokenizer.ggml.fim_pad_token_id", "fim_rep": "tokenizer.ggml.fim_rep_token_id",
            "fim_sep": "tokenizer.ggml.fim_sep_token_id", "sep": "tokenizer.ggml.seperator_token_id"}


def token_attrs(meta, n_vocab):
    """Attribute bits per token from `tokenizer.ggml.token_type` (all NORMAL when absent)."""
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        return np.full(n_vocab, NORMAL, np.int32)  # [n_vocab]
    types = np.asarray(types, np.int64)[:n_vocab]  # [n_vocab]
    if len(types) < n_vocab:
        raise GGUFError(f"tokenizer.ggml.token_type has {len(types)} entries for {n_vocab} tokens")
    return _TYPE_TO_ATTR[np.where((types >= 0) & (types < 8), types, 0)]  # [n_vocab]


def special_ids(meta, defaults, n_vocab):
    """{role: id or None}: the model family's defaults overridden by in-range metadata ids."""
    ids = {}
    for role, key in _ID_KEYS.items():
        tid = defaults.get(role)
        if tid is not None and not 0 <= tid < n_vocab:
            tid = None
        value = meta.get(key)
        if value is not None and 0 <= int(value) < n_vocab:
            tid = int(value)
        ids[role] = tid
    return ids


def _first_present(token_to_id, texts):
    return next((token_to_id[t] for t in texts if t in token_to_id), None)


def fim_by_text(token_to_id):
    """{fim_pre, fim_suf, fim_mid, fim_sep: id or None} from token texts alone (a vocabulary without GGUF keys)."""
    return {role: _first_present(token_to_id, FIM_TEXTS[role]) for role in FIM_ROLES}


def detect_by_text(ids, token_to_id, attrs):
    """Fill EOT/EOM/FIM ids from token texts and mark them CONTROL, as llama.cpp's loader does."""
    for role, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
        if ids[role] is None:
            ids[role] = _first_present(token_to_id, texts)
            if ids[role] is not None:
                attrs[ids[role]] |= CONTROL


def end_of_generation_ids(ids, token_to_id, attrs):
    """llama.cpp's special_eog_ids: FIM pad/repo/sep, end-of-turn texts, EOS, EOT and EOM."""
    eog = {ids[r] for r in ("fim_pad", "fim_rep", "fim_sep") if ids[r] is not None}
    for text in EOG_TEXTS:
        tid = token_to_id.get(text)
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= CONTROL
    for text in ALWAYS_RENDERED:
        if text in token_to_id:
            attrs[token_to_id[text]] = USER_DEFINED
    eog.update(ids[r] for r in ("eos", "eot", "eom") if ids[r] is not None)
    _drop_harmony_end(eog, token_to_id, attrs)
    return frozenset(eog)


def _drop_harmony_end(eog, token_to_id, attrs):
    """With <|return|>+<|call|> (gpt-oss) or <|calls|>+<|flush|> (solar-open), <|end|> is no stop."""
    present = {t for t in ("<|return|>", "<|call|>", "<|calls|>", "<|flush|>", "<|end|>")
               if token_to_id.get(t) in eog}
    has_call = "<|call|>" in present or "<|calls|>" in present
    harmony = "<|return|>" in present and has_call
    solar = has_call and "<|flush|>" in present
    if "<|end|>" in present and (harmony or solar):
        end = token_to_id["<|end|>"]
        eog.discard(end)
        attrs[end] = USER_DEFINED


def special_cache(attrs, tokens):
    """Ids that text is partitioned around (control, user-defined, unknown), longest text first."""
    ids = np.nonzero(attrs & (CONTROL | USER_DEFINED | UNKNOWN))[0].tolist()
    return sorted(ids, key=lambda i: -len(tokens[i].encode("utf-8", "surrogatepass")))


def apply_strip_rules(meta, attrs, cache, token_to_id):
    """Per-model lstrip/rstrip llama.cpp sets by name: Phi-3 rstrips around its special tokens,
    Jina v2 / nomic-bert-moe / jina-bert-v3 / ModernBERT mask tokens eat the space before them."""
    name = str(meta.get("general.name", "")).lower()
    pre = str(meta.get("tokenizer.ggml.pre", ""))
    arch = str(meta.get("general.architecture", ""))
    if any(p in pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
            a in arch for a in ("nomic-bert-moe", "jina-bert-v3")):
        _lstrip(attrs, token_to_id, "<mask>")
    elif "phi-3" in name or "phi3" in name:
        for tid in cache:
            attrs[tid] |= RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            tid = token_to_id.get(text)
            if tid is not None:
                attrs[tid] = attrs[tid] | RSTRIP if on else attrs[tid] & ~RSTRIP
    elif "modern-bert" in name:
        _lstrip(attrs, token_to_id, "[MASK]")


def _lstrip(attrs, token_to_id, text):
    tid = token_to_id.get(text)
    if tid is not None:
        attrs[tid] |= LSTRIP


@dataclass
class SpecialPartitioner:
    """Splits text into raw fragments (str) and special token ids (int), llama.cpp's st_partition."""

    cache: list
    tokens: list
    attrs: np.ndarray

    def partition(self, text, parse_special):
        fragments = [text]
        for tid in self.cache:
            attr = int(self.attrs[tid])
            if not parse_special and attr & (CONTROL | UNKNOWN):
                continue
            piece = self.tokens[tid]
            if piece in text:
                fragments = [part for frag in fragments
                             for part in _split_fragment(frag, tid, piece, attr)]
        return fragments


def _split_fragment(frag, tid, piece, attr):
    if isinstance(frag, int) or piece not in frag:
        return [frag]
    out, pos, end = [], 0, len(frag)
    while True:
        hit = frag.find(piece, pos)
        if hit < 0:
            break
        left = hit
        while attr & LSTRIP and left > pos and frag[left - 1] in _C_SPACE:
            left -= 1
        if left > pos:
            out.append(frag[pos:left])
        out.append(tid)
        pos = hit + len(piece)
        while attr & RSTRIP and pos < end and frag[pos] in _C_SPACE:
            pos += 1
    if pos < end:
        out.append(frag[pos:])
    return out
