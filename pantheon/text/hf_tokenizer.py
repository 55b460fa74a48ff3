"""The tokenizer of a HuggingFace model: tokenizer.json run by the `tokenizers` library, the reference."""

import functools
import json
import os

from pantheon.errors import GGUFError
from pantheon.text.bpe import byte_decode
from pantheon.text.vocab import VocabDecoding
from pantheon.text.specials import fim_by_text

MAX_TOKENIZER_BYTES = 256 << 20


class HFTokenizerError(GGUFError):
    """tokenizer.json is missing, too big, or not a tokenizer the `tokenizers` library reads."""


def _load(path):
    import tokenizers

    if not os.path.isfile(path):
        raise HFTokenizerError(f"{path}: tokenizer.json is absent (a tokenizer.model-only repository is not supported)")
    if os.path.getsize(path) > MAX_TOKENIZER_BYTES:
        raise HFTokenizerError(f"{path}: tokenizer.json is over {MAX_TOKENIZER_BYTES} bytes")
    with open(path, "rb") as f:
        source = f.read().decode("utf-8", "replace")
    try:
        tok = tokenizers.Tokenizer.from_str(source)
        literal = tokenizers.Tokenizer.from_str(source)
    except Exception as e:  # the library raises a bare Exception on any malformed field
        raise HFTokenizerError(f"{path}: not a tokenizer.json the tokenizers library reads: {e}") from None
    for t in (tok, literal):
        t.no_truncation()
        t.no_padding()
    literal.encode_special_tokens = True  # special-token text is encoded as plain text
    return tok, literal, json.loads(source).get("decoder")


def _decoder_steps(decoder):
    """The decoder's per-token steps, flattened: ('bytelevel',), ('bytefallback',), ('replace', a, b)."""
    if not isinstance(decoder, dict):
        return []
    kind = decoder.get("type")
    if kind == "Sequence":
        return [s for d in decoder.get("decoders") or () for s in _decoder_steps(d)]
    if kind == "ByteLevel":
        return [("bytelevel",)]
    if kind == "ByteFallback":
        return [("bytefallback",)]
    if kind == "Metaspace":
        return [("replace", decoder.get("replacement", "\u2581"), " ")]
    if kind == "Replace" and isinstance(decoder.get("pattern"), dict) and "String" in decoder["pattern"]:
        return [("replace", decoder["pattern"]["String"], decoder.get("content", ""))]
    return []


class HFTokenizer(VocabDecoding):
    """Same surface as pantheon.text.tokenizer.Tokenizer: encode, token_bytes, decode, special ids."""

    def __init__(self, path):
        self._tok, self._literal, decoder = _load(path)
        self.model = "hf"
        self.token_to_id = self._tok.get_vocab(with_added_tokens=True)
        self.n_vocab = max(self.token_to_id.values(), default=-1) + 1
        self.tokens = [""] * self.n_vocab
        for text, tid in self.token_to_id.items():
            self.tokens[tid] = text
        added = self._tok.get_added_tokens_decoder()
        self._added = {tid for tid in added}
        self._control = {tid for tid, t in added.items() if t.special}
        self._steps = _decoder_steps(decoder)
        self._pieces = [None] * self.n_vocab
        self.set_specials(None, None)

    def pad_to(self, n_vocab):
        """Cover the model's whole embedding: ids past tokenizer.json (checkpoints pad vocab_size to a
        round number) become '[PAD{id}]' tokens that render as nothing, as llama.cpp's converter makes them.
        A tokenizer larger than the model is refused: its ids would index past the embedding."""
        if n_vocab < self.n_vocab:
            raise HFTokenizerError(f"tokenizer.json has {self.n_vocab} tokens, more than the model's "
                                   f"vocab_size {n_vocab}")
        self.tokens += [f"[PAD{i}]" for i in range(self.n_vocab, n_vocab)]
        self._pieces += [b""] * (n_vocab - self.n_vocab)
        self.n_vocab = n_vocab

    def set_specials(self, bos, eos, stop_ids=()):
        """Name the BOS/EOS ids (from tokenizer_config.json) and every id that ends generation."""
        self.bos_id, self.eos_id = bos, eos
        self.eot_id = self.eom_id = self.unk_id = self.pad_id = self.sep_id = None
        self.add_sep = False  # a reranker's query/document separator: llama.cpp adds one for BERT vocabularies only
        self.stop_ids = frozenset(i for i in (eos, *stop_ids) if i is not None)
        self.fim_ids = fim_by_text(self.token_to_id)
        probe = self._tok.encode("a", add_special_tokens=True).ids  # what the post-processor adds
        self.add_bos = bos is not None and bool(probe) and probe[0] == bos
        self.add_eos = eos is not None and len(probe) > 1 and probe[-1] == eos

    def encode(self, text, add_special=True, parse_special=False):
        """Token ids of `text`; add_special runs the post-processor (BOS/EOS), parse_special turns
        special-token text such as '<|im_start|>' into that token."""
        tok = self._tok if parse_special else self._literal
        return tok.encode(text, add_special_tokens=add_special).ids

    @functools.cached_property
    def max_token_chars(self):
        """At least the most characters of text one token can stand for, >= 1 (see Tokenizer's).

        Without a normalizer a token's spelling has a character per text character or byte it covers.
        A normalizer may compose several code points into one (NFC: at most three, e.g. Hangul jamo),
        so the bound is widened by four; a text that only fits after stripping long runs of accents
        is refused as too long, a 400, never a crash."""
        longest = max(1, max(map(len, self.tokens), default=1))
        return longest if self._tok.normalizer is None else 4 * longest

    def _special(self, tid):
        """Special added tokens."""
        return tid in self._control

    def _piece(self, tid):
        """As the tokenizer.json decoder spells one token."""
        text = self.tokens[tid]
        if tid in self._added:
            return text.encode("utf-8", "surrogatepass")
        for step in self._steps:
            if step[0] == "bytelevel":
                raw = byte_decode(text)
                return raw if raw is not None else text.encode("utf-8", "surrogatepass")
            if step[0] == "bytefallback" and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                return bytes([int(text[3:5], 16)])
            if step[0] == "replace":
                text = text.replace(step[1], step[2])
        return text.encode("utf-8", "surrogatepass")
