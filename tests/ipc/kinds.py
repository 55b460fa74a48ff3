"""Message kinds for the transport tests: the rings carry any kind byte 1..255 without reading it."""

import enum


class Kind(enum.IntEnum):
    SUBMIT = 1
    CANCEL = 2
    TOKENS = 3
    DONE = 4
