"""Kimi-K2's word splitter: llama.cpp's hand-written form of its Han-aware regex, step for step."""

from pantheon.text.codepoints import category, is_han, is_space

_CONTRACTION_1 = frozenset("stmd")
_CONTRACTION_2 = frozenset(("re", "ve", "ll"))


class _Cursor:
    """Code points of one span; positions outside it read as nothing (no category, no character)."""

    def __init__(self, text, start, end):
        self.text, self.start, self.end = text, start, end

    def ch(self, pos):
        return self.text[pos] if self.start <= pos < self.end else ""

    def cat(self, pos):
        ch = self.ch(pos)
        return category(ch) if ch else ""

    def space(self, pos):
        ch = self.ch(pos)
        return bool(ch) and is_space(ch)

    def word_letter(self, pos):
        ch = self.ch(pos)
        return bool(ch) and category(ch) == "L" and not is_han(ord(ch))


def _letters(c, pos):
    """[^\\r\\n\\p{L}\\p{N}]? then non-Han letters then an optional contraction; None if no letter."""
    ch, cat = c.ch(pos), c.cat(pos)
    if not c.word_letter(pos):
        if ch in "\r\n" or cat in ("L", "N") or not c.word_letter(pos + 1):
            return None
        pos += 1
    while c.word_letter(pos):
        pos += 1
    if c.ch(pos) == "'" and pos + 1 < c.end:
        nxt = c.ch(pos + 1).lower()
        if nxt in _CONTRACTION_1:
            return pos + 2
        if pos + 2 < c.end and nxt + c.ch(pos + 2).lower() in _CONTRACTION_2:
            return pos + 3
    return pos


def _symbols(c, pos):
    """` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*`; None when it does not match at `pos`."""
    probe = pos + 1 if c.ch(pos) == " " else pos

    def other(p):
        return c.ch(p) != "" and not c.space(p) and c.cat(p) not in ("L", "N")

    if not other(probe):
        return None
    pos = probe
    while other(pos):
        pos += 1
    while c.ch(pos) in ("\r", "\n") and c.ch(pos):
        pos += 1
    return pos


def _spaces(c, pos):
    """`\\s*[\\r\\n]+`, then `\\s+(?!\\S)`, then `\\s+`, then one character."""
    n, last_newline = 0, 0
    while c.space(pos + n):
        if c.ch(pos + n) in "\r\n":
            last_newline = pos + n + 1
        n += 1
    if last_newline:
        return last_newline
    if n > 1 and c.ch(pos + n):
        return pos + n - 1
    return pos + max(n, 1)


def _next_end(c, pos):
    if is_han(ord(c.ch(pos))):
        while c.ch(pos) and is_han(ord(c.ch(pos))):
            pos += 1
        return pos
    end = _letters(c, pos)
    if end is not None:
        return end
    if c.cat(pos) == "N":
        run = pos
        while c.cat(pos) == "N" and pos - run < 3:
            pos += 1
        return pos
    end = _symbols(c, pos)
    return end if end is not None else _spaces(c, pos)


def kimi_k2_split(text, spans):
    """Split every (start, end) span of `text` as llama.cpp's unicode_regex_split_custom_kimi_k2."""
    out = []
    for start, end in spans:
        c, pos = _Cursor(text, start, end), start
        while pos < end:
            nxt = _next_end(c, pos)
            out.append((pos, nxt))
            pos = nxt
    return out
