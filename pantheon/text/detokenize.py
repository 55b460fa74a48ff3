"""Incremental detokenizer: text per generated token, never splitting a UTF-8 character."""

import codecs


class Detokenizer:
    """Feed token ids one at a time; each call returns only whole characters.

    Bytes of a character that spans tokens (byte-fallback pieces, byte-level BPE fragments of CJK
    or emoji) are held back until the character is complete.  Invalid sequences become U+FFFD
    exactly as in Tokenizer.decode, so the concatenation of every push() and the final flush()
    equals tokenizer.decode(all ids, special).
    """

    def __init__(self, tokenizer, special=False):
        self.tokenizer = tokenizer
        self.special = special
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, tid):
        """Text completed by token `tid` ('' while a character is still partial)."""
        return self._decoder.decode(self.tokenizer.token_bytes(int(tid), self.special))

    def push_many(self, ids):
        """Text completed by several tokens at once."""
        return "".join(self.push(t) for t in ids)

    def flush(self):
        """Whatever is still held back (a truncated character becomes U+FFFD); resets the state."""
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text

    @property
    def pending(self):
        """True while bytes of an unfinished character are held back."""
        return bool(self._decoder.getstate()[0])
