"""BPE sessions with their own outer loop: `whitespace` (split at whitespace first) and `hybriddna`
(DNA between <dna> tags as fixed 6-mers), as llama.cpp's tokenizer sessions of those names."""

from pantheon.text.codepoints import is_space
from pantheon.text.wpm import fold_lower

# The private-use suffix that keeps a DNA k-mer token apart from the same letters as a BPE token.
DNA_KMER_MARKER = "\ue000"
_DNA_OPEN, _DNA_CLOSE, _DNA_OOV, _K = "<dna>", "</dna>", "<oov>", 6
_ASCII_UPPER = bytes.maketrans(b"abcdefghijklmnopqrstuvwxyz", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class WhitespaceEncoder:
    """Whitespace-separated segments, optionally lower-cased, each BPE-encoded on its own."""

    def __init__(self, bpe, lowercase):
        self.bpe = bpe
        self.lowercase = lowercase

    def encode(self, text):
        out, segment = [], []
        for ch in text + " ":
            if is_space(ch):
                if segment:
                    out.extend(self.bpe.encode("".join(segment)))
                    segment = []
            else:
                segment.append(fold_lower(ch) if self.lowercase else ch)
        return out


def strip_kmer_markers(tokens, token_to_id):
    """Token texts as llama.cpp shows them: the k-mers after <oov> lose their marker suffix."""
    oov = token_to_id.get(_DNA_OOV)
    if oov is None:
        return tokens
    tail = [t[:-1] if len(t) > 1 and t.endswith(DNA_KMER_MARKER) else t for t in tokens[oov + 1:]]
    return tokens[:oov + 1] + tail


class HybridDnaEncoder:
    """Plain BPE outside <dna>...</dna>; inside, upper-cased 6-byte k-mers (the last padded with 'A'),
    each its own token or <oov>."""

    def __init__(self, bpe, token_to_id):
        self.bpe = bpe
        self.token_to_id = token_to_id
        self.tags = [token_to_id.get(t) for t in (_DNA_OPEN, _DNA_CLOSE, _DNA_OOV)]

    def encode(self, text):
        if None in self.tags:
            return self.bpe.encode(text)
        begin_id, end_id, _ = self.tags
        out, pos = [], 0
        while pos < len(text):
            start = text.find(_DNA_OPEN, pos)
            if start < 0:
                out.extend(self.bpe.encode(text[pos:]))
                break
            if start > pos:
                out.extend(self.bpe.encode(text[pos:start]))
            out.append(begin_id)
            body = start + len(_DNA_OPEN)
            end = text.find(_DNA_CLOSE, body)
            out.extend(self._kmers(text[body:] if end < 0 else text[body:end]))
            if end < 0:
                break
            out.append(end_id)
            pos = end + len(_DNA_CLOSE)
        return out

    def _kmers(self, seq):
        raw = seq.encode("utf-8", "surrogatepass").translate(_ASCII_UPPER)
        chunks = [raw[i:i + _K] for i in range(0, len(raw), _K)]
        if chunks and len(chunks[-1]) < _K:
            chunks[-1] = chunks[-1].ljust(_K, b"A")
        return [self._kmer_id(c) for c in chunks]

    def _kmer_id(self, chunk):
        try:
            tid = self.token_to_id.get(chunk.decode("utf-8") + DNA_KMER_MARKER)
        except UnicodeDecodeError:
            tid = None  # a k-mer cut through a character can match no token
        return self.tags[2] if tid is None else tid
