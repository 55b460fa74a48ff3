"""BPE pre-tokenizers chosen by `tokenizer.ggml.pre`, splitting text exactly as llama.cpp does."""

import re
import unicodedata
from dataclasses import dataclass

from pantheon.errors import GGUFError

# llama.cpp runs these regexes on a "collapsed" copy of the text in which every non-ASCII code point
# is replaced by one stand-in per Unicode category (llama.cpp unicode.cpp, unicode_regex_split), and
# `\s` is the C locale's isspace.  Doing the same here keeps category edge cases identical.
_WHITESPACE_STANDIN = "\x0b"
_STANDIN = {"N": "\ue0d1", "L": "\ue0d2", "P": "\ue0d3", "M": "\ue0d4", "S": "\ue0d5"}
_OTHER_STANDIN = "\ue0d0"

# What each `\p{..}` class means for ASCII in the collapsed regex (llama.cpp's k_ucat_map verbatim:
# note '~' is in neither P nor S there).
_ASCII_CLASS = {
    "N": "0-9",
    "L": "A-Za-z",
    "P": r"!-#%-*,-/:-;?-@\[-\]_\{\}",
    "M": "",
    "S": r"\$\+<->\^`\|",
}
_CLASS_NAMES = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S",
                "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L"}

# Unicode White_Space, the set llama.cpp's unicode-data marks as whitespace.
_UNICODE_WHITESPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
    + list(range(0x2000, 0x200B))
)


class _CollapseTable(dict):
    """str.translate table that maps each non-ASCII code point to its category stand-in, lazily."""

    def __missing__(self, cpt):
        if cpt in _UNICODE_WHITESPACE:
            standin = _WHITESPACE_STANDIN
        else:
            standin = _STANDIN.get(unicodedata.category(chr(cpt))[0], _OTHER_STANDIN)
        self[cpt] = standin
        return standin


_COLLAPSE = _CollapseTable({c: c for c in range(128)})


def collapse(text):
    """The one-stand-in-per-category copy of `text` (same length) that the regexes run on."""
    return text.translate(_COLLAPSE)


def _collapse_pattern(expr):
    """Rewrite `\\p{X}` classes to stand-in + ASCII ranges, as llama.cpp does for its std::regex."""
    out, inside, i = [], False, 0
    while i < len(expr):
        ch = expr[i]
        if ch == "[" and (i == 0 or expr[i - 1] != "\\"):
            inside = True
        elif ch == "]" and inside and expr[i - 1] != "\\":
            inside = False
        elif expr.startswith("\\p{", i):
            close = expr.find("}", i + 3)
            name = _CLASS_NAMES.get(expr[i + 3:close])
            if name is not None:
                body = _STANDIN[name] + _ASCII_CLASS[name]
                out.append(body if inside else f"[{body}]")
                i = close + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _compile(expr):
    return re.compile(_collapse_pattern(expr), re.ASCII)


# The regexes of llama.cpp's llm_tokenizer_bpe, by pre-tokenizer family.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]")
_STARCODER = (r"\p{N}", _GPT2)
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]")


@dataclass(frozen=True)
class PreTokenizer:
    """One `tokenizer.ggml.pre` family: its regexes and the vocab flags llama.cpp ties to it."""

    name: str
    exprs: tuple
    ignore_merges: bool = False
    clean_spaces: bool = True
    add_bos: bool = False


def _family(exprs, names, **flags):
    return {name: (tuple(exprs), flags) for name in names}


_FAMILIES = {
    **_family(_DEFAULT, ["default"]),
    **_family([_LLAMA3], ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2"], ignore_merges=True, add_bos=True),
    **_family([_LLAMA3], ["dbrx", "smaug-bpe"]),
    **_family([_GPT2], ["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                        "jina-v2-de", "a.x-4.0", "mellum", "mpt", "olmo", "jais", "exaone4"]),
    **_family([_GPT2], ["trillion", "granite-docling"], clean_spaces=False),
    **_family([_QWEN2], ["qwen2", "deepseek-r1-qwen", "kormo", "hunyuan", "solar-open"],
              clean_spaces=False),
    **_family([_QWEN2], ["stablelm2", "megrez"]),
    **_family([_QWEN35], ["qwen35"], clean_spaces=False),
    **_family(_STARCODER, ["starcoder", "refact", "codeshell", "exaone", "minerva-7b"]),
    **_family(_STARCODER, ["command-r", "smollm"], clean_spaces=False),
    **_family(_FALCON, ["falcon"]),
    **_family([_SEED_CODER], ["seed-coder"], clean_spaces=False),
}
_COMPILED = {}


def pre_tokenizer(name):
    """The PreTokenizer for a `tokenizer.ggml.pre` value ('' or None means llama.cpp's 'default')."""
    name = name or "default"
    if name not in _FAMILIES:
        raise GGUFError(f"tokenizer.ggml.pre = {name!r} is not a pre-tokenizer Pantheon knows")
    exprs, flags = _FAMILIES[name]
    return PreTokenizer(name, exprs, **flags)


def _compiled(expr):
    pattern = _COMPILED.get(expr)
    if pattern is None:
        pattern = _COMPILED[expr] = _compile(expr)
    return pattern


def _split_spans(collapsed, spans, pattern):
    """Split every (start, end) span by `pattern`; unmatched gaps stay pieces of their own."""
    out = []
    for start, end in spans:
        pos = start
        for m in pattern.finditer(collapsed[start:end]):
            a, b = m.start() + start, m.end() + start
            if a > pos:
                out.append((pos, a))
            out.append((a, b))
            pos = b
        if pos < end:
            out.append((pos, end))
    return out


def split_words(text, pre):
    """The words llama.cpp's unicode_regex_split makes of `text` for PreTokenizer `pre`."""
    if not text:
        return []
    collapsed = collapse(text)
    spans = [(0, len(text))]
    for expr in pre.exprs:
        spans = _split_spans(collapsed, spans, _compiled(expr))
    return [text[a:b] for a, b in spans]
