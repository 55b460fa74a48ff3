"""SentencePiece BPE (`tokenizer.ggml.model == "llama"`): score-ordered merges with byte fallback."""

import heapq

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
        syms = list(text)
        n = len(syms)
        if n < 2:
            return syms
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            self._push(heap, syms, i, i + 1)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            ls, rs = syms[left], syms[right]
            if not ls or not rs or len(ls) + len(rs) != size:
                continue
            syms[left], syms[right] = ls + rs, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            self._push(heap, syms, prv[left], left)
            self._push(heap, syms, left, nxt[left])
        return [s for s in syms if s]

    def _push(self, heap, syms, left, right):
        if left < 0 or right < 0:
            return
        text = syms[left] + syms[right]
        tid = self.token_to_id.get(text)
        if tid is not None:
            heapq.heappush(heap, (-self.scores[tid], left, right, len(text)))
