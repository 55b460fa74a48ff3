"""llama.cpp's test vocabulary (`tokenizer.ggml.model == "test"`): each 5-byte chunk of the text hashed
to a token id; a token decodes to its id in hex."""

_CHUNK = 5
_MASK = (1 << 64) - 1


class HashedEncoder:
    """Rolling hash (h = h * 31 + byte, 64-bit) of fixed-size byte chunks, modulo the vocabulary."""

    def __init__(self, n_vocab):
        self.n_vocab = n_vocab

    def encode(self, text):
        raw = text.encode("utf-8", "surrogatepass")
        out = []
        for pos in range(0, len(raw), _CHUNK):
            h = 0
            for b in raw[pos:pos + _CHUNK]:
                h = (h * 31 + b) & _MASK
            out.append(h % self.n_vocab)
        return out
