"""PLaMo-2 (`tokenizer.ggml.model == "plamo2"`): the best-scoring split into vocabulary pieces by dynamic
programming from the end of the text, UTF-8 byte tokens for what no piece covers (llama.cpp's
llm_tokenizer_plamo2, whose suffix table enumerates the same candidates this looks up directly)."""

import math

from pantheon.errors import GGUFError
from pantheon.text import specials as sp

_INVALID_SCORE = -20000000
_UNKNOWN_SCORE = -10000000
_BOM = "\ufeff"


def _fixed_score(score):
    """Scores as llama.cpp compares them: round(score * 1e4) as an integer; NaN/inf never wins."""
    return int(round(score * 1e4)) if math.isfinite(score) else _INVALID_SCORE


class Plamo2Encoder:
    """One PLaMo-2 vocabulary: {piece: (score, id)} for non-byte tokens, and the 256 byte tokens."""

    def __init__(self, tokens, attrs, scores):
        self.pieces, self.byte_ids = {}, [None] * 256
        for tid, text in enumerate(tokens):
            if attrs[tid] & sp.BYTE:
                if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                    self.byte_ids[int(text[3:5], 16)] = tid
                continue
            self.pieces[text] = (_fixed_score(float(scores[tid])), tid)  # a later duplicate wins
        missing = [b for b in range(256) if self.byte_ids[b] is None]
        if missing:
            raise GGUFError(f"plamo2 vocabulary has no byte token <0x{missing[0]:02X}>")
        self.max_len = max(map(len, self.pieces), default=0)

    def encode(self, text):
        if text.startswith(_BOM):
            text = text[1:]
        steps = self._best_steps(text)
        out, pos = [], 0
        while pos < len(text):
            length, tid = steps[pos]
            if tid is None:
                out.extend(self.byte_ids[b] for b in text[pos].encode("utf-8", "surrogatepass"))
            else:
                out.append(tid)
            pos += length
        return out

    def _best_steps(self, text):
        """steps[i] = (piece length, token id or None for byte fallback) on the best path from i."""
        n = len(text)
        cost = [1 << 60] * (n + 1)
        cost[n] = 0
        steps = [None] * (n + 1)
        for i in range(n - 1, -1, -1):
            for length in range(min(self.max_len, n - i), 0, -1):  # longest first: ties keep it
                hit = self.pieces.get(text[i:i + length])
                if hit is not None and hit[0] > _INVALID_SCORE and cost[i + length] - hit[0] < cost[i]:
                    cost[i], steps[i] = cost[i + length] - hit[0], (length, hit[1])
            if cost[i + 1] - _UNKNOWN_SCORE < cost[i]:
                cost[i], steps[i] = cost[i + 1] - _UNKNOWN_SCORE, (1, None)
        return steps
