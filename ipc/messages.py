"""Message bodies: fixed little-endian structs plus token-id arrays; never text, never pickles."""

import array
import struct
import sys
from typing import NamedTuple

from ipc.errors import FrameError

assert sys.byteorder == "little", "token arrays are sent in native order"

_SUBMIT = struct.Struct("<IiffffffQIIII")
_DONE = struct.Struct("<BxxxII")
_ERROR = struct.Struct("<HH")
_TOKEN = 4


class Sampling(NamedTuple):
    """Sampling parameters of one request, a fixed 44-byte record (56 with the counts)."""

    max_tokens: int = 256
    top_k: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0
    flags: int = 0


class Submit(NamedTuple):
    sampling: Sampling
    prompt: array.array  # token ids, u32
    extra: bytes  # opaque routing bytes (session id, model slot), length-checked


class Done(NamedTuple):
    reason: int
    prompt_tokens: int
    completion_tokens: int


class Error(NamedTuple):
    code: int
    detail: bytes


def _tokens(ids):
    a = ids if isinstance(ids, array.array) and ids.typecode == "I" else array.array("I", ids)
    assert a.itemsize == _TOKEN
    return a


def encode_submit(sampling, prompt, extra=b""):
    toks = _tokens(prompt)
    head = _SUBMIT.pack(*sampling, len(toks), len(extra), 0)
    return b"".join((head, toks.tobytes(), extra))


def decode_submit(body):
    if len(body) < _SUBMIT.size:
        raise FrameError(f"SUBMIT body of {len(body)} bytes < {_SUBMIT.size}")
    *fields, n_prompt, n_extra, _ = _SUBMIT.unpack_from(body)
    if _SUBMIT.size + n_prompt * _TOKEN + n_extra != len(body):
        raise FrameError(f"SUBMIT body of {len(body)} bytes does not hold {n_prompt} tokens "
                         f"and {n_extra} extra bytes")
    start = _SUBMIT.size
    toks = array.array("I")
    toks.frombytes(body[start:start + n_prompt * _TOKEN])
    return Submit(Sampling(*fields), toks, bytes(body[start + n_prompt * _TOKEN:]))


def encode_tokens(ids):
    return _tokens(ids).tobytes()


def decode_tokens(body):
    if len(body) % _TOKEN:
        raise FrameError(f"TOKENS body of {len(body)} bytes is not a whole number of u32 ids")
    toks = array.array("I")
    toks.frombytes(body)
    return toks


def encode_done(reason, prompt_tokens, completion_tokens):
    return _DONE.pack(reason, prompt_tokens, completion_tokens)


def decode_done(body):
    if len(body) != _DONE.size:
        raise FrameError(f"DONE body of {len(body)} bytes, expected {_DONE.size}")
    return Done(*_DONE.unpack(body))


def encode_error(code, detail=b""):
    if len(detail) > 0xFFFF:
        raise FrameError(f"ERROR detail of {len(detail)} bytes exceeds 65535")
    return _ERROR.pack(code, len(detail)) + bytes(detail)


def decode_error(body):
    if len(body) < _ERROR.size:
        raise FrameError(f"ERROR body of {len(body)} bytes < {_ERROR.size}")
    code, n = _ERROR.unpack_from(body)
    if _ERROR.size + n != len(body):
        raise FrameError(f"ERROR body of {len(body)} bytes does not hold {n} detail bytes")
    return Error(code, bytes(body[_ERROR.size:]))
