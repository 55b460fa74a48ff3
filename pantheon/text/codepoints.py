"""Code point properties as llama.cpp's unicode tables give them: whitespace, Han, general category."""

import unicodedata

# Unicode White_Space, the set llama.cpp's unicode-data marks as whitespace.
UNICODE_WHITESPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
    + list(range(0x2000, 0x200B))
)


def category(ch):
    """The one-letter general category ('L', 'N', 'P', 'M', 'S', 'Z', 'C') of one character."""
    return unicodedata.category(ch)[0]


def is_space(ch):
    return ord(ch) in UNICODE_WHITESPACE


def is_han(cpt):
    """llama.cpp's unicode_cpt_is_han: the CJK ideograph blocks."""
    return (0x4E00 <= cpt <= 0x9FFF or 0x3400 <= cpt <= 0x4DBF or 0x20000 <= cpt <= 0x2A6DF
            or 0x2A700 <= cpt <= 0x2EBEF or 0xF900 <= cpt <= 0xFAFF or 0x2F800 <= cpt <= 0x2FA1F)
