"""What every tokenizer does alike once it has a vocabulary: check ids, spell tokens, decode bytes."""

from pantheon.errors import EngineError


class VocabDecoding:
    """Decoding over `tokens` (spellings by id) and `n_vocab`; a subclass says which ids are special
    (`_special`) and what bytes an id stands for (`_piece`, made once per id into `_pieces`)."""

    def token_text(self, tid):
        """The token's vocabulary spelling (e.g. '\u2581Hello', '\u0120world', '<|im_end|>')."""
        return self.tokens[self._check(tid)]

    def is_special(self, tid):
        """Special tokens are rendered only when decoding with special=True."""
        return self._special(self._check(tid))

    def token_bytes(self, tid, special=False):
        """The bytes token `tid` stands for as one token (llama.cpp's token_to_piece, no space stripping)."""
        if not special and self._special(self._check(tid)):
            return b""
        piece = self._pieces[tid]
        if piece is None:
            piece = self._pieces[tid] = self._piece(tid)
        return piece

    def decode(self, ids, special=False):
        """Text of `ids` (invalid UTF-8 becomes U+FFFD); special=True renders special tokens."""
        raw = b"".join(self.token_bytes(int(t), special) for t in ids)
        return raw.decode("utf-8", "replace")

    def _check(self, tid):
        if not 0 <= tid < self.n_vocab:
            raise EngineError(f"token id {tid} is outside the vocabulary (n_vocab={self.n_vocab})")
        return tid
