"""BPE (`tokenizer.ggml.model` gpt2, gemma4, ...): rank-ordered merges on GPT-2 bytes or raw UTF-8."""

from pantheon.text.merges import merge_symbols
from pantheon.text.pretokenize import split_words
from pantheon.text.spm import byte_token_text, escape_whitespace


def _bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable code points."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_UNICODE = _bytes_to_unicode()
UNICODE_TO_BYTE = {ch: b for b, ch in BYTE_TO_UNICODE.items()}
# bytes.translate table (latin-1 view) and str.translate table (back to latin-1 code points).
_ENCODE_BYTES = {b: ch for b, ch in BYTE_TO_UNICODE.items()}
_DECODE_CHARS = {ord(ch): b for ch, b in UNICODE_TO_BYTE.items()}

_CACHE_LIMIT = 1 << 16


def byte_encode(word):
    """The UTF-8 bytes of `word`, each spelled as its GPT-2 alphabet character."""
    raw = word.encode("utf-8", "surrogatepass")
    return raw.decode("latin-1").translate(_ENCODE_BYTES)


def byte_decode(token_text):
    """The bytes a normal byte-level token stands for; None if it has characters outside the alphabet."""
    latin = token_text.translate(_DECODE_CHARS)
    try:
        return latin.encode("latin-1")
    except UnicodeEncodeError:
        return None


def parse_merges(merges):
    """{"left right": rank} from `tokenizer.ggml.merges`; on a repeated merge the first rank wins.

    Keyed by the merge string itself: byte-level symbols never contain a literal space, so this
    agrees with llama.cpp's split at the first space after position 0 for every lookup it can make.
    """
    return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))


class BpeEncoder:
    """llama.cpp's llm_tokenizer_bpe_session for one vocabulary and pre-tokenizer."""

    def __init__(self, token_to_id, ranks, pre):
        self.token_to_id = token_to_id
        self.ranks = ranks
        self.pre = pre
        self._cache = {}
        self._spell = byte_encode if pre.byte_encode else str
        # Gemma 4 takes a run of newlines whole when the vocabulary has it (llama.cpp PR 21343).
        self._whole_newlines = pre.family == "GEMMA4"

    def encode(self, text):
        """Token ids of one raw-text fragment (special tokens already split out)."""
        if self.pre.escape_whitespaces:
            text = escape_whitespace(text)
        out = []
        cache = self._cache
        for word in split_words(text, self.pre):
            ids = cache.get(word)
            if ids is None:
                ids = self._encode_word(self._spell(word))
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[word] = ids
            out.extend(ids)
        return out

    def _encode_word(self, word):
        if self.pre.ignore_merges and word in self.token_to_id:
            return (self.token_to_id[word],)
        if self._whole_newlines and word in self.token_to_id and not word.strip("\n"):
            return (self.token_to_id[word],)
        ids = []
        for piece in self._merge(word):
            tid = self.token_to_id.get(piece)
            if tid is not None:
                ids.append(tid)
            else:
                ids.extend(self._unmerged_bytes(piece))
        return tuple(ids)

    def _unmerged_bytes(self, piece):
        """llama.cpp looks each UTF-8 byte up as a one-byte token (only ASCII ones can exist), or as
        a <0xXX> token when the vocabulary is not byte-encoded."""
        raw = piece.encode("utf-8", "surrogatepass")
        if self.pre.byte_encode:
            found = (self.token_to_id.get(chr(b)) for b in raw if b < 0x80)
        else:
            found = (self.token_to_id.get(byte_token_text(b)) for b in raw)
        return [tid for tid in found if tid is not None]

    def _merge(self, word):
        """Merge adjacent symbols lowest rank first, ties leftmost, as llama.cpp's work queue does."""
        return merge_symbols(word, lambda a, b: self.ranks.get(a + " " + b))
