"""SentencePiece BPE (`tokenizer.ggml.model == "llama"`): score-ordered merges with byte fallback."""

from pantheon.text.merges import merge_symbols

SPACE_ESCAPE = "\u2581"


def escape_whitespace(text):
    """llama.cpp's llama_escape_whitespace: every ' ' becomes '\u2581'."""
    return text.replace(" ", SPACE_ESCAPE)


def byte_token_text(b):
    """The vocabulary spelling of a byte-fallback token."""
    return f"<0x{b:02X}>"


class SpmEncoder:
    """llama.cpp's llm_tokenizer_spm_session for one vocabulary."""

    def __init__(self, token_to_id, scores, unk_id):
        self.token_to_id = token_to_id
        self.scores = scores
        self.unk_id = unk_id
        self._byte_ids = [self._byte_id(b) for b in range(256)]

    def _byte_id(self, b):
        tid = self.token_to_id.get(byte_token_text(b))
        if tid is None:
            tid = self.token_to_id.get(chr(b) if b < 0x80 else None)
        return self.unk_id if tid is None else tid

    def encode(self, text):
        """Token ids of one fragment whose spaces are already escaped to '\u2581'."""
        out = []
        for piece in self._merge(text):
            tid = self.token_to_id.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                raw = piece.encode("utf-8", "surrogatepass")
                out.extend(self._byte_ids[b] for b in raw)
        return out

    def _merge(self, text):
        """Merge adjacent symbols highest score first, ties leftmost; every merge is a vocab token."""
        return merge_symbols(text, self._score_key)

    def _score_key(self, a, b):
        tid = self.token_to_id.get(a + b)
        return None if tid is None else -self.scores[tid]
