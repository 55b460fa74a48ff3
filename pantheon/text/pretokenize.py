"""Split text into BPE words with a chain of regexes, exactly as llama.cpp's unicode_regex_split does."""

import re

from pantheon.text.codepoints import UNICODE_WHITESPACE as _UNICODE_WHITESPACE, category as _category
from pantheon.text.kimi import kimi_k2_split

# llama.cpp runs a regex that names `\p{..}` classes on a "collapsed" copy of the text in which every
# non-ASCII code point is replaced by one stand-in per Unicode category (unicode.cpp,
# unicode_regex_split), and `\s` is the C locale's isspace.  Doing the same keeps edge cases identical.
_WHITESPACE_STANDIN = "\x0b"
_STANDIN = {"N": "\ue0d1", "L": "\ue0d2", "P": "\ue0d3", "M": "\ue0d4", "S": "\ue0d5"}
_OTHER_STANDIN = "\ue0d0"

# What each `\p{..}` class means for ASCII in the collapsed regex (llama.cpp's k_ucat_map).
_ASCII_CLASS = {
    "N": "0-9",
    "L": "A-Za-z",
    "P": r"!-#%-*,-/:-;?-@\[-\]_\{\}",
    "M": "",
    "S": r"\$\+<->\^`\|~",
}
_CLASS_NAMES = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S",
                "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L"}
_CLASS_RE = re.compile(r"\\p\{(?:%s)\}" % "|".join(_CLASS_NAMES))


# Expressions llama.cpp never hands to a regex engine but to hand-written splitters.
KIMI_K2 = r"\p{Han}+"
DIGIT_GROUPS = (r"\p{AFMoE_digits}", r"\d{1,3}(?=(?:\d{3})*\b)")
# SuperBPE's zero-width split before every run of ASCII digits whose length is a multiple of three:
# run by a regex engine it is quadratic in the run length, so it gets a linear splitter (same cuts).
THOUSANDS = r"(?=(\d{3})+(?!\d))"


class _CollapseTable(dict):
    """str.translate table that maps each non-ASCII code point to its category stand-in, lazily."""

    def __missing__(self, cpt):
        if cpt in _UNICODE_WHITESPACE:
            standin = _WHITESPACE_STANDIN
        else:
            standin = _STANDIN.get(_category(chr(cpt)), _OTHER_STANDIN)
        self[cpt] = standin
        return standin


class _WideTable(dict):
    """str.translate table for regexes without `\\p{..}`: only non-ASCII whitespace becomes '\\v'."""

    def __missing__(self, cpt):
        self[cpt] = _WHITESPACE_STANDIN if cpt in _UNICODE_WHITESPACE and cpt > 0x7F else chr(cpt)
        return self[cpt]


_COLLAPSE = _CollapseTable({c: c for c in range(128)})
_WIDE = _WideTable()


def collapse(text):
    """The one-stand-in-per-category copy of `text` (same length) that the regexes run on."""
    return text.translate(_COLLAPSE)


def _ecmascript_to_python(expr, collapsed):
    """Rewrite an ECMAScript regex for Python's re: `\\p{X}` to stand-in + ASCII ranges (collapsed
    mode, as llama.cpp does for its std::regex) and `$` to `\\Z` (ECMAScript `$` is end of input)."""
    out, inside, i = [], False, 0
    while i < len(expr):
        ch = expr[i]
        if ch == "\\":
            m = _CLASS_RE.match(expr, i) if collapsed else None
            if m is None:
                out.append(expr[i:i + 2])
                i += 2
                continue
            name = _CLASS_NAMES[m.group()[3:-1]]
            body = _STANDIN[name] + _ASCII_CLASS[name]
            out.append(body if inside else f"[{body}]")
            i = m.end()
            continue
        if ch == "[" and not inside:
            inside = True
        elif ch == "]" and inside:
            inside = False
        out.append("\\Z" if ch == "$" and not inside else ch)
        i += 1
    return "".join(out)


def uses_categories(expr):
    """Whether llama.cpp runs `expr` on the collapsed text (it names a `\\p{..}` class)."""
    return _CLASS_RE.search(expr) is not None


_COMPILED = {}


def _compiled(expr):
    pattern = _COMPILED.get(expr)
    if pattern is None:
        collapsed = uses_categories(expr)
        pattern = re.compile(_ecmascript_to_python(expr, collapsed), re.ASCII)
        pattern = _COMPILED[expr] = (pattern, collapsed)
    return pattern


def _regex_split(view, spans, pattern):
    """Split every (start, end) span by `pattern`; unmatched gaps stay pieces of their own."""
    out = []
    for start, end in spans:
        pos = start
        for m in pattern.finditer(view[start:end]):
            a, b = m.start() + start, m.end() + start
            if a > pos:
                out.append((pos, a))
            out.append((a, b))
            pos = b
        if pos < end:
            out.append((pos, end))
    return out


def _digit_groups(text, spans):
    """llama.cpp's AFMoE digit splitter: each run of \\p{N} in groups of three from the right."""
    out = []
    for start, end in spans:
        prev, pos = start, start
        while pos < end:
            if _category(text[pos]) != "N":
                pos += 1
                continue
            run = pos
            while pos < end and _category(text[pos]) == "N":
                pos += 1
            cut = run + (pos - run) % 3
            for b in [cut] * (cut > run) + list(range(cut + 3, pos + 1, 3)):
                if b > prev:
                    out.append((prev, b))
                prev = b
        if prev < end:
            out.append((prev, end))
    return out


def _thousands(text, spans):
    """Cut each span where the ASCII digits from there to the end of their run number 3k (k >= 1)."""
    out = []
    for start, end in spans:
        cuts, pos = [], end
        while pos > start:
            if not "0" <= text[pos - 1] <= "9":
                pos -= 1
                continue
            run_end = pos
            while pos > start and "0" <= text[pos - 1] <= "9":
                pos -= 1
            cuts.extend(range(run_end - 3, pos - 1, -3))
        bounds = [start, *sorted(c for c in cuts if c > start), end]
        out.extend(zip(bounds, bounds[1:]))
    return out


def split_words(text, pre):
    """The words llama.cpp's unicode_regex_split makes of `text` for PreTokenizer `pre`."""
    if not text:
        return []
    views = {}
    spans = [(0, len(text))]
    for expr in pre.exprs:
        if expr == KIMI_K2:
            spans = kimi_k2_split(text, spans)
        elif expr in DIGIT_GROUPS:
            spans = _digit_groups(text, spans)
        elif expr == THOUSANDS:
            spans = _thousands(text, spans)
        else:
            pattern, collapsed = _compiled(expr)
            if collapsed not in views:
                views[collapsed] = text.translate(_COLLAPSE if collapsed else _WIDE)
            spans = _regex_split(views[collapsed], spans, pattern)
    return [text[a:b] for a, b in spans if b > a]
