"""Token-level grammars (llguidance): JSON schema, GBNF or Lark text as a mask over one vocabulary.

Why llguidance: it installs from PyPI as one self-contained wheel (no torch, no transformers),
takes any vocabulary as a list of token byte strings plus a tokenize callback (so our own GGUF
tokenizers work unchanged, SPM and BPE alike), compiles JSON schema, Lark and, through its
converter, llama.cpp's GBNF, and computes a mask in tens of microseconds with an Earley parser
over a token trie. xgrammar needs torch for its masks; outlines-core builds a regex index per
schema that is slow for large vocabularies and does not take GBNF.
"""

import json
import weakref

import numpy as np

from pantheon.errors import InvalidParameter

JSON_SCHEMA, LARK, GBNF = "json_schema", "lark", "gbnf"
COMPACT = {"whitespace_flexible": False}  # one space after ':' and ',' at most, as JSON serializers write
_VOCABS = weakref.WeakKeyDictionary()  # tokenizer -> its llguidance tokenizer (built once, ~50 ms)


def compile_spec(kind, text):
    """llguidance's grammar text for a (kind, text) spec; InvalidParameter naming the field if it is bad."""
    import llguidance
    from llguidance.gbnf_to_lark import gbnf_to_lark

    try:
        if kind == JSON_SCHEMA:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.loads(text), defaults=COMPACT)
        elif kind == GBNF:
            grammar = llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(text))
        else:
            grammar = llguidance.LLMatcher.grammar_from_lark(text)
    except Exception as exc:  # the compiler raises several types, all meaning "bad grammar"
        raise InvalidParameter(f"{kind}: cannot compile the grammar: {exc}", kind) from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise InvalidParameter(f"{kind}: invalid grammar: {error}", kind)
    return grammar


def vocabulary(tokenizer):
    """The llguidance tokenizer of a pantheon Tokenizer: token bytes, control tokens, stop ids."""
    lltok = _VOCABS.get(tokenizer)
    if lltok is None:
        import llguidance

        lltok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Wrapper(tokenizer)), n_vocab=tokenizer.n_vocab,
                                       eos_token=sorted(tokenizer.stop_ids) or None)
        _VOCABS[tokenizer] = lltok
    return lltok


def lark_json(schema):
    """A Lark `%json` item for `schema`, compact like compile_spec's schemas (for tool-call grammars)."""
    return "%json " + json.dumps(dict(schema, **{"x-guidance": COMPACT}))


class _Wrapper:
    """What llguidance.TokenizerWrapper reads: control tokens carry its 0xFF marker byte."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_token_id = min(tok.stop_ids) if tok.stop_ids else tok.eos_id
        self.bos_token_id = tok.bos_id
        self.special_token_ids = [i for i in range(tok.n_vocab) if tok.is_special(i)]
        special = set(self.special_token_ids)
        self.tokens = [b"\xff" + tok.token_bytes(i, special=True) if i in special else tok.token_bytes(i)
                       for i in range(tok.n_vocab)]
        self._by_bytes = {b: i for i, b in reversed(list(enumerate(self.tokens))) if b and i not in special}
        self._longest = max(map(len, self._by_bytes), default=1)

    def __call__(self, text):
        """Ids whose bytes are exactly `text` (llguidance trusts this for the text a grammar forces):
        the tokenizer's own ids when they are, else a longest-match split over the vocabulary."""
        data = text if isinstance(text, bytes) else text.encode()
        ids = self.tok.encode_exact(data.decode("utf-8", errors="replace"))
        if b"".join(self.tokens[i] for i in ids) == data:
            return ids
        return self._greedy(data)

    def _greedy(self, data):
        out, i = [], 0
        while i < len(data):
            n = next((n for n in range(min(self._longest, len(data) - i), 0, -1) if data[i:i + n] in self._by_bytes), 0)
            if n == 0:  # a byte no token spells: llguidance falls back to its own tokenizer for it
                return out
            out.append(self._by_bytes[data[i:i + n]])
            i += n
        return out


class Constraint:
    """One generation under a grammar: mask() the logits before sampling, accept() each token.

    Duck-typed for the engine, which never imports this module: mask(logits) -> logits,
    accept(token), finished (the grammar is complete and allows nothing more).
    """

    def __init__(self, tokenizer, grammar):
        import llguidance
        import llguidance.numpy as lln

        self._lln, self.n_vocab = lln, tokenizer.n_vocab
        self.matcher = llguidance.LLMatcher(vocabulary(tokenizer), grammar)
        self.stop_ids = np.array(sorted(tokenizer.stop_ids), dtype=np.int64)  # [s]
        self._bits = lln.allocate_token_bitmask(1, vocabulary(tokenizer).vocab_size)  # [1, words]
        self._stops = frozenset(int(t) for t in self.stop_ids)

    def allowed(self):
        """Boolean [n_vocab]: the tokens that keep the text a prefix of the grammar's language."""
        self._lln.fill_next_token_bitmask(self.matcher, self._bits)
        bits = np.unpackbits(self._bits[0].view(np.uint8), bitorder="little")[:self.n_vocab]  # [n_vocab]
        allowed = bits.astype(bool)  # [n_vocab]
        if self.matcher.is_accepting() and self.stop_ids.size:
            allowed[self.stop_ids] = True
        return allowed

    def fork(self):
        """An independent copy in the same state (another choice of an n > 1 request)."""
        other = object.__new__(Constraint)
        other.__dict__.update(self.__dict__)
        other.matcher = self.matcher.deep_copy()
        other._bits = self._bits.copy()  # [1, words] its own mask buffer
        return other

    def mask(self, logits):
        return np.where(self.allowed(), logits, np.float32(-np.inf)).astype(np.float32)  # [n_vocab]

    def accept(self, token):
        if int(token) not in self._stops:
            self.matcher.consume_token(int(token))

    @property
    def finished(self):
        return self.matcher.is_stopped() or self.matcher.is_error()

