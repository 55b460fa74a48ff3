"""Unigram (`tokenizer.ggml.model == "t5"`): SentencePiece's precompiled-charsmap normaliser, then the
best-scoring segmentation by Viterbi over bytes, as llama.cpp's llm_tokenizer_ugm_session."""

import struct

import numpy as np

from pantheon.errors import GGUFError
from pantheon.text import specials as sp
from pantheon.text.spm import SPACE_ESCAPE

_UNKNOWN_PENALTY = 10.0
_UTF8_LEN = (1,) * 12 + (2, 2, 3, 4)  # by the high four bits of the first byte


class CharsMap:
    """SentencePiece's precompiled charsmap: an XOR-compressed double array (XCDA) over input bytes
    whose leaves index NUL-terminated replacement strings."""

    def __init__(self, blob):
        if len(blob) < 4:
            raise GGUFError("tokenizer.ggml.precompiled_charsmap is too small for its header")
        (size,) = struct.unpack_from("<I", blob)
        if size + 4 >= len(blob):
            raise GGUFError("tokenizer.ggml.precompiled_charsmap: XCDA size past the end of the blob")
        self.nodes = np.frombuffer(blob, "<u4", size // 4, 4).tolist()
        self.replacements = blob[4 + size:]

    def _node(self, i):
        if i >= len(self.nodes):
            raise GGUFError("tokenizer.ggml.precompiled_charsmap: XCDA index out of range")
        return self.nodes[i]

    def _base(self, i):
        node = self._node(i)
        return (node >> 10) << ((node & (1 << 9)) >> 6)

    def longest(self, data, start):
        """(replacement bytes, input bytes consumed) for the longest mapped prefix, or None."""
        best, index = None, self._base(0)
        for pos in range(start, len(data)):
            c = data[pos]
            if c == 0:
                break
            index ^= c
            node = self._node(index)
            if node & ((1 << 31) | 0xFF) != c:
                break
            leaf = (node >> 8) & 1
            index ^= self._base(index)
            if leaf:
                best = (self._node(index) & ((1 << 31) - 1), pos - start + 1)
        if best is None:
            return None
        offset, consumed = best
        end = self.replacements.find(b"\0", offset)
        if offset >= len(self.replacements) or end < 0:
            raise GGUFError("tokenizer.ggml.precompiled_charsmap: replacement string out of range")
        return self.replacements[offset:end], consumed


class UgmEncoder:
    """One Unigram vocabulary with llama.cpp's normaliser flags."""

    def __init__(self, tokens, attrs, scores, unk_id, charsmap, flags):
        self.unk_id = unk_id
        self.charsmap = charsmap
        self.space = SPACE_ESCAPE.encode() if flags.get("escape_whitespaces", True) else b" "
        self.prepend = flags.get("add_space_prefix", False)
        self.merge_spaces = flags.get("remove_extra_whitespaces", False)
        normal = attrs & sp.NORMAL != 0  # [n_vocab]
        kept = attrs & (sp.NORMAL | sp.USER_DEFINED | sp.UNUSED) != 0  # [n_vocab]
        user = attrs & sp.USER_DEFINED != 0  # [n_vocab]
        self.piece_id = {tokens[i].encode("utf-8", "surrogatepass"): i for i in np.nonzero(kept)[0].tolist()}
        self.score = [0.0 if user[i] else float(s) for i, s in enumerate(scores)]
        self.max_len = max(map(len, self.piece_id), default=0)
        min_score = min((scores[i] for i in np.nonzero(normal)[0].tolist()), default=np.float32(3.4e38))
        self.unknown_score = float(np.float32(min_score) - np.float32(_UNKNOWN_PENALTY))
        self.user_prefixes = {t.encode("utf-8", "surrogatepass")[:n] for i, t in enumerate(tokens) if user[i]
                              for n in range(1, len(t.encode("utf-8", "surrogatepass")) + 1)}

    def encode(self, text):
        data = self.normalize(text.encode("utf-8", "surrogatepass"))
        if not data:
            return []
        best = self._viterbi(data)
        out, pos, prev_unknown = [], len(data), False
        while True:
            tid, start, _ = best[pos]
            unknown = tid == self.unk_id
            if not (prev_unknown and unknown):
                out.append(tid)
            if start == 0:
                break
            prev_unknown, pos = unknown, start
        return out[::-1]

    def _viterbi(self, data):
        n = len(data)
        best = [(self.unk_id, 0, -np.inf)] * (n + 1)
        best[0] = (self.unk_id, 0, 0.0)
        pos = 0
        while pos < n:
            width = min(_UTF8_LEN[data[pos] >> 4], n - pos)
            base = best[pos][2]
            whole_char = False
            for end in range(pos + 1, min(n, pos + self.max_len) + 1):
                tid = self.piece_id.get(data[pos:end])
                if tid is None:
                    continue
                whole_char |= end - pos == width
                if base + self.score[tid] > best[end][2]:
                    best[end] = (tid, pos, base + self.score[tid])
            if not whole_char and base + self.unknown_score > best[pos + width][2]:
                best[pos + width] = (self.unk_id, pos, base + self.unknown_score)
            pos += width
        return best

    def normalize(self, data):
        out, pos, in_word, prepended = bytearray(), 0, False, False
        while pos < len(data):
            piece, used = self._normalize_prefix(data, pos)
            for c in piece:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (self.prepend and not prepended) or self.merge_spaces:
                            out += self.space
                            prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not self.merge_spaces:
                        out += self.space
            pos += used
        return bytes(out)

    def _normalize_prefix(self, data, pos):
        n = 0
        while pos + n < len(data) and data[pos:pos + n + 1] in self.user_prefixes:
            n += 1
        if n:
            return data[pos:pos + n], n
        hit = self.charsmap.longest(data, pos) if self.charsmap else None
        if hit is not None:
            return hit
        width = _UTF8_LEN[data[pos] >> 4]
        chunk = data[pos:pos + width]
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            return "\ufffd".encode(), 1
        return chunk, width
