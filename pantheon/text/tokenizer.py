"""The tokenizer of a GGUF model (SPM or byte-level BPE), matching llama.cpp token for token."""

import numpy as np

from pantheon.errors import EngineError, GGUFError, MissingKey
from pantheon.gguf.file import open_gguf
from pantheon.text.pretokenize import pre_tokenizer
from pantheon.text.bpe import BpeEncoder, byte_decode, parse_merges
from pantheon.text.spm import SPACE_ESCAPE, SpmEncoder, escape_whitespace
from pantheon.text import specials as sp

KEY_MODEL = "tokenizer.ggml.model"
KEY_TOKENS = "tokenizer.ggml.tokens"

# llama.cpp's per-family defaults before metadata overrides them.
_SPM_DEFAULTS = {"bos": 1, "eos": 2, "unk": 0}
_BPE_DEFAULTS = {"bos": 11, "eos": 11}


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


class Tokenizer:
    """Encode text to token ids and back; see pantheon.text.detokenize for streaming output."""

    def __init__(self, meta):
        model = meta.get(KEY_MODEL)
        if model not in ("llama", "gpt2"):
            raise GGUFError(f"{KEY_MODEL} = {model!r} is not a tokenizer Pantheon supports (llama, gpt2)")
        self.model = model
        self.tokens = _tokens(meta)
        self.n_vocab = len(self.tokens)
        self.token_to_id = _token_to_id(self.tokens)
        self.attrs = sp.token_attrs(meta, self.n_vocab)  # [n_vocab]
        self._init_encoder(meta)
        self._init_specials(meta)
        if model == "llama":
            self._spm = SpmEncoder(self.token_to_id, _scores(meta, self.n_vocab), self.unk_id)
        self._pieces = [None] * self.n_vocab

    @classmethod
    def from_metadata(cls, meta):
        """Build from a {GGUF key: value} mapping (string arrays as list[str], numbers as numpy)."""
        return cls(meta)

    def _init_encoder(self, meta):
        if self.model == "llama":
            self.pre = None
            self.add_space_prefix = _flag(meta, "tokenizer.ggml.add_space_prefix", True)
            add_bos, defaults = True, _SPM_DEFAULTS
        else:
            self.pre = pre_tokenizer(meta.get("tokenizer.ggml.pre"))
            merges = meta.get("tokenizer.ggml.merges")
            if merges is None:
                raise MissingKey("tokenizer.ggml.merges is absent from a gpt2 (BPE) vocabulary")
            self._bpe = BpeEncoder(self.token_to_id, parse_merges(merges), self.pre)
            self.add_space_prefix = _flag(meta, "tokenizer.ggml.add_space_prefix", False)
            add_bos, defaults = self.pre.add_bos, _BPE_DEFAULTS
        self.add_bos = _flag(meta, "tokenizer.ggml.add_bos_token", add_bos)
        self.add_eos = _flag(meta, "tokenizer.ggml.add_eos_token", False)
        self._defaults = defaults

    def _init_specials(self, meta):
        ids = sp.special_ids(meta, self._defaults, self.n_vocab)
        sp.detect_by_text(ids, self.token_to_id, self.attrs)
        self.stop_ids = sp.end_of_generation_ids(ids, self.token_to_id, self.attrs)
        cache = sp.special_cache(self.attrs, self.tokens)
        sp.apply_strip_rules(meta, self.attrs, cache, self.token_to_id)
        self._partitioner = sp.SpecialPartitioner(cache, self.tokens, self.attrs)
        self.bos_id, self.eos_id, self.eot_id = ids["bos"], ids["eos"], ids["eot"]
        self.eom_id, self.unk_id, self.pad_id = ids["eom"], ids["unk"], ids["pad"]
        for tid, name in ((self.bos_id, "bos"), (self.eos_id, "eos")):
            if tid is None and getattr(self, f"add_{name}"):
                raise GGUFError(f"tokenizer.ggml.add_{name}_token is true but no {name} id is in range")

    # ---- encoding -------------------------------------------------------------------------------

    def encode(self, text, add_special=True, parse_special=False):
        """Token ids of `text`; add_special adds BOS/EOS per the metadata, parse_special
        turns control-token text such as '<|im_start|>' into that token."""
        fragments = self._partitioner.partition(text, parse_special) if text else []
        out = [self.bos_id] if add_special and self.add_bos else []
        if self.model == "llama":
            self._encode_spm(fragments, out)
        else:
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                else:
                    out.extend(self._bpe.encode(frag))
        if add_special and self.add_eos:
            out.append(self.eos_id)
        return out

    def _encode_spm(self, fragments, out):
        prev_special = True  # the first fragment gets the leading space too
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                frag = " " + frag
            out.extend(self._spm.encode(escape_whitespace(frag)))
            prev_special = False

    # ---- decoding -------------------------------------------------------------------------------

    def token_text(self, tid):
        """The token's vocabulary spelling (e.g. '\u2581Hello', '\u0120world', '<|im_end|>')."""
        return self.tokens[self._check(tid)]

    def is_special(self, tid):
        """Control or unknown tokens: rendered only when decoding with special=True."""
        return bool(self.attrs[self._check(tid)] & (sp.CONTROL | sp.UNKNOWN))

    def token_bytes(self, tid, special=False):
        """The bytes token `tid` stands for (llama.cpp's token_to_piece, no space stripping)."""
        if not special and self.attrs[self._check(tid)] & (sp.CONTROL | sp.UNKNOWN):
            return b""
        piece = self._pieces[tid]
        if piece is None:
            piece = self._pieces[tid] = self._piece(tid)
        return piece

    def _piece(self, tid):
        attr, text = int(self.attrs[tid]), self.tokens[tid]
        if attr & (sp.CONTROL | sp.UNKNOWN | sp.USER_DEFINED):
            return text.encode("utf-8", "surrogatepass")
        if attr & sp.NORMAL:
            if self.model == "llama":
                return text.replace(SPACE_ESCAPE, " ").encode("utf-8", "surrogatepass")
            raw = byte_decode(text)
            return raw if raw is not None else text.encode("utf-8", "surrogatepass")
        if attr & sp.BYTE:
            return bytes([int(text[3:5], 16)])
        return b""

    def decode(self, ids, special=False):
        """Text of `ids` (invalid UTF-8 becomes U+FFFD); special=True renders control tokens."""
        raw = b"".join(self.token_bytes(int(t), special) for t in ids)
        return raw.decode("utf-8", "replace")

    def _check(self, tid):
        if not 0 <= tid < self.n_vocab:
            raise EngineError(f"token id {tid} is outside the vocabulary (n_vocab={self.n_vocab})")
        return tid


def open_tokenizer(path):
    """The tokenizer of the GGUF at `path`; reads only metadata, so vocabulary-only files open."""
    return Tokenizer.from_metadata(open_gguf(path).metadata)
