"""RWKV World tokenizer (`tokenizer.ggml.model == "rwkv"`, or a rwkv_vocab_v20230424.txt file):
greedy longest match over the byte strings of the vocabulary."""

import ast

from pantheon.errors import EngineError, GGUFError

_ESCAPES = {b"t": b"\t", b"n": b"\n", b"r": b"\r"}
# What llama.cpp's converter writes for an RWKV World vocabulary besides its lines.
WORLD_VOCAB_SIZE = 65536
WORLD_EOT_ID = 261  # "\n\n", which RWKV World chat ends a turn with


def unescape_token(text):
    """The bytes of a GGUF RWKV token: llama.cpp's llama_unescape_rwkv_token (\\t \\n \\r \\xhh \\c)."""
    raw = text.encode("utf-8", "surrogatepass")
    out, i = bytearray(), 0
    while i < len(raw):
        if raw[i] != 0x5C:
            out.append(raw[i])
            i += 1
        elif raw[i + 1:i + 2] == b"x":
            if i + 3 < len(raw):  # a cut-off \\x escape yields nothing
                out.append((_hex_digit(raw[i + 2]) * 16 + _hex_digit(raw[i + 3])) & 0xFF)
            i += 4
        else:
            out += _ESCAPES.get(raw[i + 1:i + 2], raw[i + 1:i + 2])
            i += 2
    return bytes(out)


def _hex_digit(b):
    """llama.cpp reads lower-case hex only: 'a'.. count from 10, anything else from '0'."""
    return (b - 0x61 + 10 if b >= 0x61 else b - 0x30) & 0xFF


class _Node(dict):
    __slots__ = ("value",)

    def __init__(self):
        super().__init__()
        self.value = None


class RwkvEncoder:
    """llama.cpp's llm_tokenizer_rwkv_session: a byte trie, longest match, unknown bytes -> unk."""

    def __init__(self, token_bytes, unk_id):
        self.unk_id = unk_id
        self._root = _Node()
        for tid, raw in enumerate(token_bytes):
            node = self._root
            for b in raw:
                node = node.setdefault(b, _Node())
            node.value = tid

    def encode(self, text):
        raw = text.encode("utf-8", "surrogatepass")
        out, pos = [], 0
        while pos < len(raw):
            node = self._root.get(raw[pos])
            if node is None:
                if self.unk_id is None:
                    raise EngineError(f"byte 0x{raw[pos]:02x} has no RWKV token and the vocabulary no unk")
                out.append(self.unk_id)
                pos += 1
                continue
            best, best_end, end = 0, pos + 1, pos
            while node is not None:
                if node.value is not None:
                    best, best_end = node.value, end + 1
                end += 1
                node = node.get(raw[end]) if end < len(raw) else None
            out.append(best)
            pos = best_end
        return out


def world_vocab_metadata(path):
    """GGUF tokenizer metadata for an RWKV World vocabulary file (lines `<id> <python str or bytes
    literal> <byte length>`), as llama.cpp's converter writes it: '<s>' first, lines in file order,
    spelled repr(bytes)[2:-1], padded with unused tokens to 65536."""
    tokens, types = ["<s>"], [3]  # LLAMA_TOKEN_TYPE_CONTROL
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                tokens.append(repr(_parse_line(line, path, lineno))[2:-1])
                types.append(1)  # NORMAL
    pad = range(len(tokens), max(WORLD_VOCAB_SIZE, len(tokens)))
    return {"tokenizer.ggml.model": "rwkv",
            "tokenizer.ggml.tokens": tokens + [f"[PAD{i}]" for i in pad],
            "tokenizer.ggml.token_type": types + [5] * len(pad),  # UNUSED
            "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0,
            "tokenizer.ggml.eot_token_id": WORLD_EOT_ID}


def _parse_line(line, path, lineno):
    try:
        parts = line.rstrip("\n").split(" ")
        value = ast.literal_eval(" ".join(parts[1:-1]))
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(raw, bytes) or len(raw) != int(parts[-1]):
            raise ValueError(f"the byte length {parts[-1]!r} does not match the token")
        return raw
    except (ValueError, SyntaxError) as exc:
        raise GGUFError(f"{path}:{lineno}: not an RWKV World vocabulary line ({exc})") from None
