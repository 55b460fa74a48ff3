"""The tokenizer of a GGUF model (SPM, BPE, WPM, RWKV ...), matching llama.cpp token for token."""

import functools

import numpy as np

from pantheon.errors import GGUFError, MissingKey
from pantheon.gguf.file import open_gguf
from pantheon.text.pretokenizers import pre_tokenizer
from pantheon.text.bpe import BpeEncoder, byte_decode, parse_merges
from pantheon.text.hashed import HashedEncoder
from pantheon.text.plamo2 import Plamo2Encoder
from pantheon.text.rwkv import RwkvEncoder, unescape_token, world_vocab_metadata
from pantheon.text.spm import SPACE_ESCAPE, SpmEncoder, escape_whitespace
from pantheon.text.sessions import HybridDnaEncoder, WhitespaceEncoder, strip_kmer_markers
from pantheon.text.ugm import CharsMap, UgmEncoder
from pantheon.text.vocab import VocabDecoding
from pantheon.text.wpm import WpmEncoder
from pantheon.text import specials as sp

KEY_MODEL = "tokenizer.ggml.model"
KEY_TOKENS = "tokenizer.ggml.tokens"

# `tokenizer.ggml.model` -> (llama.cpp's llama_vocab_type, its default special ids before metadata).
VOCAB_TYPES = {
    "llama": ("SPM", {"bos": 1, "eos": 2, "unk": 0}),
    "gpt2": ("BPE", {"bos": 11, "eos": 11}),
    "hybriddna": ("BPE", {"bos": 11, "eos": 11}),
    "whitespace": ("BPE", {"bos": 11, "eos": 11}),
    "gemma4": ("BPE", {}),
    "bert": ("WPM", {"bos": 101, "unk": 100, "sep": 102, "pad": 0}),
    "t5": ("UGM", {"eos": 1, "unk": 2, "pad": 0}),
    "rwkv": ("RWKV", {}),
    "plamo2": ("PLAMO2", {"bos": 1, "eos": 2, "unk": 0, "pad": 3}),
    "test": ("TEST", {}),
}
# llama.cpp types Pantheon does not implement, named so the refusal says what the file is.
_NOT_IMPLEMENTED = {"no_vocab": "no vocabulary", "none": "no vocabulary"}


def _tokens(meta):
    tokens = meta.get(KEY_TOKENS)
    if tokens is None:
        raise MissingKey(f"{KEY_TOKENS} is absent: the file carries no vocabulary")
    # llama.cpp renames empty tokens so that they can never match text.
    return [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]


def _token_to_id(tokens):
    """{text: id}; on a duplicate text the first id wins."""
    return dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))


def _scores(meta, n_vocab):
    """Per-token SPM merge scores as Python floats (float32 values, compared exactly)."""
    scores = meta.get("tokenizer.ggml.scores")
    if scores is None:
        return [0.0] * n_vocab
    scores = np.asarray(scores, np.float32)[:n_vocab]  # [n_vocab]
    if len(scores) < n_vocab:
        raise GGUFError(f"tokenizer.ggml.scores has {len(scores)} entries for {n_vocab} tokens")
    return scores.astype(np.float64).tolist()


def _flag(meta, key, default):
    value = meta.get(key)
    return default if value is None else bool(value)


class Tokenizer(VocabDecoding):
    """Encode text to token ids and back; see pantheon.text.detokenize for streaming output."""

    def __init__(self, meta):
        model = meta.get(KEY_MODEL)
        if model not in VOCAB_TYPES:
            what = _NOT_IMPLEMENTED.get(model, "not a tokenizer llama.cpp knows")
            raise GGUFError(f"{KEY_MODEL} = {model!r} is not a tokenizer Pantheon supports ({what})")
        self.model = model
        self.vocab_type, defaults = VOCAB_TYPES[model]
        self.tokens = _tokens(meta)
        self.n_vocab = len(self.tokens)
        self.token_to_id = _token_to_id(self.tokens)
        if model == "hybriddna":
            self.tokens = strip_kmer_markers(self.tokens, self.token_to_id)
        self.attrs = sp.token_attrs(meta, self.n_vocab)  # [n_vocab]
        self.pre = None
        self.escape_whitespaces = False
        add_bos, add_eos = getattr(self, f"_init_{self.vocab_type.lower()}")(meta)
        if self.pre is not None and self.pre.no_bos:
            defaults = {**defaults, "bos": None}
        self._init_specials(meta, defaults, add_bos, add_eos)
        self._encoder = self._make_encoder(meta)
        self._pieces = [None] * self.n_vocab

    @classmethod
    def from_metadata(cls, meta):
        """Build from a {GGUF key: value} mapping (string arrays as list[str], numbers as numpy)."""
        return cls(meta)

    # ---- per vocab type: flags (returns the default add_bos, add_eos), then the encoder ----------

    def _init_spm(self, meta):
        self.add_space_prefix = _flag(meta, "tokenizer.ggml.add_space_prefix", True)
        return True, False

    def _init_bpe(self, meta):
        # Gemma 4 vocabularies are BPE with the gemma4 pre-tokenizer, whatever tokenizer.ggml.pre says.
        self.pre = pre_tokenizer("gemma4" if self.model == "gemma4" else meta.get("tokenizer.ggml.pre"))
        self.escape_whitespaces = self.pre.escape_whitespaces
        self.add_space_prefix = _flag(meta, "tokenizer.ggml.add_space_prefix", False)
        return self.pre.add_bos, False

    def _init_wpm(self, meta):
        self.add_space_prefix = False
        return True, False

    def _init_ugm(self, meta):
        self.add_space_prefix = _flag(meta, "tokenizer.ggml.add_space_prefix", False)
        return False, True

    def _init_rwkv(self, meta):
        self.add_space_prefix = False
        return False, False

    def _init_plamo2(self, meta):
        self.add_space_prefix = False
        return False, False

    def _init_test(self, meta):
        self.add_space_prefix = False
        return False, False

    def _make_encoder(self, meta):
        kind = self.vocab_type
        if kind == "SPM":
            return SpmEncoder(self.token_to_id, _scores(meta, self.n_vocab), self.unk_id)
        if kind == "WPM":
            lower = _flag(meta, "tokenizer.ggml.normalizer.lowercase", True)
            strip = _flag(meta, "tokenizer.ggml.normalizer.strip_accents", lower)
            return WpmEncoder(self.token_to_id, self.unk_id, lower, strip)
        if kind == "UGM":
            charsmap = meta.get("tokenizer.ggml.precompiled_charsmap")
            charsmap = CharsMap(np.asarray(charsmap).astype(np.uint8).tobytes()) if charsmap is not None else None
            flags = {"add_space_prefix": self.add_space_prefix,
                     "remove_extra_whitespaces": _flag(meta, "tokenizer.ggml.remove_extra_whitespaces", False)}
            return UgmEncoder(self.tokens, self.attrs, _scores(meta, self.n_vocab), self.unk_id, charsmap, flags)
        if kind == "TEST":
            return HashedEncoder(self.n_vocab)
        if kind == "PLAMO2":
            return Plamo2Encoder(self.tokens, self.attrs, _scores(meta, self.n_vocab))
        if kind == "RWKV":
            return RwkvEncoder([unescape_token(t) for t in self.tokens], self.unk_id)
        merges = meta.get("tokenizer.ggml.merges")
        if merges is None and self.pre.name != "kimi-k2":  # Kimi-K2 vocabularies carry no merges
            raise MissingKey(f"tokenizer.ggml.merges is absent from a {self.model} (BPE) vocabulary")
        bpe = BpeEncoder(self.token_to_id, parse_merges(merges or []), self.pre)
        if self.model == "whitespace":
            lower = _flag(meta, "tokenizer.ggml.normalizer.lowercase", self.pre.lowercase)
            return WhitespaceEncoder(bpe, lower)
        if self.model == "hybriddna":
            return HybridDnaEncoder(bpe, self.token_to_id)
        return bpe

    def _init_specials(self, meta, defaults, add_bos, add_eos):
        ids = sp.special_ids(meta, defaults, self.n_vocab)
        self.add_bos = _flag(meta, "tokenizer.ggml.add_bos_token", add_bos)
        self.add_eos = _flag(meta, "tokenizer.ggml.add_eos_token", add_eos)
        # a separator between a reranker's query and document (llama.cpp's default: BERT vocabularies only)
        self.add_sep = _flag(meta, "tokenizer.ggml.add_sep_token", self.vocab_type == "WPM")
        if self.pre is not None and self.pre.family == "GEMMA4":
            self.add_bos = True  # llama.cpp overrides Gemma 4's metadata here (its PR 21500)
        sp.detect_by_text(ids, self.token_to_id, self.attrs)
        self.stop_ids = sp.end_of_generation_ids(ids, self.token_to_id, self.attrs)
        cache = sp.special_cache(self.attrs, self.tokens)
        sp.apply_strip_rules(meta, self.attrs, cache, self.token_to_id)
        self._partitioner = sp.SpecialPartitioner(cache, self.tokens, self.attrs)
        self.bos_id, self.eos_id, self.eot_id = ids["bos"], ids["eos"], ids["eot"]
        self.eom_id, self.unk_id, self.pad_id = ids["eom"], ids["unk"], ids["pad"]
        self.sep_id = ids["sep"]
        self.fim_ids = {role: ids[role] for role in sp.FIM_ROLES}  # GGUF keys first, else llama.cpp's texts
        if self.vocab_type in ("RWKV", "PLAMO2", "TEST"):
            self.add_bos = self.add_eos = False  # llama.cpp adds neither to these, whatever the metadata
        if self.vocab_type == "WPM":
            self.add_bos = self.add_eos = False  # WPM frames with BOS ... SEP instead (see encode)
            needed = (("bos", self.bos_id), ("sep", self.sep_id))
        else:
            needed = ((n, ids[n]) for n in ("bos", "eos") if getattr(self, f"add_{n}"))
        for name, tid in needed:
            if tid is None:
                raise GGUFError(f"{self.model} vocabulary adds a {name} token but no {name} id is in range")

    # ---- encoding -------------------------------------------------------------------------------

    def encode(self, text, add_special=True, parse_special=False):
        """Token ids of `text`; add_special adds BOS/EOS (BERT: CLS/SEP) per the metadata,
        parse_special turns control-token text such as '<|im_start|>' into that token."""
        fragments = self._partitioner.partition(text, parse_special) if text else []
        wpm = add_special and self.vocab_type == "WPM"
        out = [self.bos_id] if add_special and self.add_bos or wpm else []
        if self.vocab_type == "SPM":
            self._encode_spm(fragments, out)
        else:
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                else:
                    out.extend(self._encoder.encode(frag))
        if add_special and self.add_eos:
            out.append(self.eos_id)
        if wpm:
            out.append(self.sep_id)
        return out

    def encode_exact(self, text):
        """Ids whose bytes are exactly `text`: no BOS/EOS, no SPM space prefix, control-token text
        taken literally (what a grammar engine needs to tokenize its forced text)."""
        if not text:
            return []
        if self.vocab_type == "SPM":
            return list(self._encoder.encode(escape_whitespace(text)))
        return [t for frag in self._partitioner.partition(text, False) for t in self._encoder.encode(frag)]

    def _encode_spm(self, fragments, out):
        prev_special = True  # the first fragment gets the leading space too
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                frag = " " + frag
            out.extend(self._encoder.encode(escape_whitespace(frag)))
            prev_special = False

    @functools.cached_property
    def max_token_chars(self):
        """At least the most characters of text one token can stand for, >= 1.

        A token's vocabulary spelling has a character per text character it covers (SPM, with '\u2581'
        for a space; specials spell their text) or per byte (byte-level BPE, byte tokens like '<0x41>'),
        so the longest spelling bounds it. A text longer than n * max_token_chars needs more than n
        tokens, which lets a caller refuse it without paying for tokenization."""
        return max(1, max(map(len, self.tokens)))

    # ---- decoding -------------------------------------------------------------------------------

    def _special(self, tid):
        """Control or unknown tokens."""
        return bool(self.attrs[tid] & (sp.CONTROL | sp.UNKNOWN))

    def _piece(self, tid):
        attr, text = int(self.attrs[tid]), self.tokens[tid]
        if self.vocab_type == "RWKV":
            return unescape_token(text)
        if self.vocab_type == "TEST":
            return format(tid, "x").encode()
        if self.vocab_type == "PLAMO2":
            is_byte = attr & sp.BYTE and len(text) == 6 and text.startswith("<0x")
            return bytes([int(text[3:5], 16)]) if is_byte else text.encode("utf-8", "surrogatepass")
        if attr & (sp.CONTROL | sp.UNKNOWN | sp.USER_DEFINED):
            return text.encode("utf-8", "surrogatepass")
        if attr & sp.NORMAL:
            if self.vocab_type != "BPE" or self.escape_whitespaces:
                return text.replace(SPACE_ESCAPE, " ").encode("utf-8", "surrogatepass")
            raw = byte_decode(text)
            return raw if raw is not None else text.encode("utf-8", "surrogatepass")
        if attr & sp.BYTE:
            return bytes([int(text[3:5], 16)])
        return b""


def open_tokenizer(path):
    """The tokenizer of the GGUF at `path`; reads only metadata, so vocabulary-only files open."""
    return Tokenizer.from_metadata(open_gguf(path).metadata)


def open_rwkv_world_vocab(path):
    """The tokenizer of an RWKV World vocabulary file (rwkv_vocab_v20230424.txt), with the ids
    llama.cpp gives the GGUF its converter makes of it."""
    return Tokenizer.from_metadata(world_vocab_metadata(path))
