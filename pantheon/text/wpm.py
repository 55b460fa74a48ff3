"""WordPiece (`tokenizer.ggml.model == "bert"`): BERT normalisation, then longest-prefix word pieces."""

import unicodedata

from pantheon.text.codepoints import category, is_space
from pantheon.text.spm import SPACE_ESCAPE


def fold_lower(ch):
    """llama.cpp's unicode_tolower: one code point to one (U+0130 becomes plain 'i')."""
    return ch.lower()[0]


def base_letter(ch):
    """llama.cpp's one-to-one 'NFD': the first code point of the full decomposition."""
    return unicodedata.normalize("NFD", ch)[0]


def _is_chinese(cpt):
    # 0x2B920 rather than 0x2B820 follows HuggingFace's Rust code, as llama.cpp does.
    return (0x4E00 <= cpt <= 0x9FFF or 0x3400 <= cpt <= 0x4DBF or 0x20000 <= cpt <= 0x2A6DF
            or 0x2A700 <= cpt <= 0x2B81F or 0x2B920 <= cpt <= 0x2CEAF or 0xF900 <= cpt <= 0xFAFF
            or 0x2F800 <= cpt <= 0x2FA1F)


def _is_control(ch):
    """llama.cpp's CONTROL flag: category C, except unassigned code points (which it leaves alone)."""
    return category(ch) == "C" and unicodedata.category(ch) != "Cn"


def _stands_alone(ch):
    cat = category(ch)
    return cat == "P" or (cat == "S" and ord(ch) < 0x7F) or _is_chinese(ord(ch))


class WpmEncoder:
    """llama.cpp's llm_tokenizer_wpm_session for one vocabulary."""

    def __init__(self, token_to_id, unk_id, lowercase=True, strip_accents=True):
        self.token_to_id = token_to_id
        self.unk_id = unk_id
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.max_len = max((len(t.encode("utf-8", "surrogatepass")) for t in token_to_id), default=0)

    def words(self, text):
        """BERT's basic tokenizer: split at whitespace, punctuation and CJK; drop controls."""
        words, cur = [], []
        for ch in text:
            if self.strip_accents:
                ch = base_letter(ch)
            if is_space(ch):
                words.append("".join(cur))
                cur = []
                continue
            cat = category(ch)
            if ch in "\x00\ufffd" or _is_control(ch) or (self.strip_accents and cat == "M"):
                continue
            piece = fold_lower(ch) if self.lowercase else ch
            if _stands_alone(ch):
                words.extend(("".join(cur), piece))
                cur = []
            else:
                cur.append(piece)
        words.append("".join(cur))
        return [w for w in words if w]

    def encode(self, text):
        """Token ids of one raw-text fragment: each word greedily, longest piece first."""
        out = []
        for word in self.words(text):
            out.extend(self._word(SPACE_ESCAPE + word))
        return out

    def _word(self, word):
        raw = word.encode("utf-8", "surrogatepass")
        ids, i = [], 0
        while i < len(raw):
            for j in range(min(len(raw), i + self.max_len + 1), i, -1):
                tid = self.token_to_id.get(raw[i:j].decode("utf-8", "ignore") if _whole(raw, i, j) else None)
                if tid is not None:
                    ids.append(tid)
                    i = j
                    break
            else:
                return [self.unk_id]
        return ids


def _whole(raw, i, j):
    """Whether raw[i:j] starts and ends on UTF-8 character boundaries (only those can be tokens)."""
    return (raw[i] & 0xC0) != 0x80 and (j == len(raw) or (raw[j] & 0xC0) != 0x80)
