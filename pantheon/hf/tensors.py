"""Safetensors files opened as hostile input: a validated JSON header, zero-copy views of the data.

A safetensors file is an 8-byte little-endian header length, that many bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the raw
little-endian tensor data. F32/F16/BF16 rows are byte for byte ggml's F32/F16/BF16 rows, so each
tensor becomes a gguf.file.TensorInfo whose `raw` is a view of the file map, never a copy.
"""

import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as T

from pantheon.errors import AbsurdValue, TruncatedFile, UnsupportedTensorType
from pantheon.gguf.file import TensorInfo

# safetensors dtype -> (ggml type, bytes per element); the only ones whose rows ggml reads as they are.
DTYPES = {"F32": (T.F32, 4), "F16": (T.F16, 2), "BF16": (T.BF16, 2)}
MAX_HEADER_BYTES = 100 << 20  # the safetensors library's own limit
MAX_DIMS = 4
_U64 = struct.Struct("<Q")


class SafetensorsError(AbsurdValue):
    """A safetensors header is malformed: not JSON, wrong fields, or offsets that disagree."""


def open_safetensors(path):
    """{name: TensorInfo} of one .safetensors file; typed errors name the file and the tensor."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        n = header_length(path, f.read(8), size)
        header = _parse_header(path, f.read(n))
    entries = _layouts(path, header, data_start=8 + n, size=size)
    if not entries:
        return {}
    whole = np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))  # [size], read-only map, plain ndarray
    return {name: _view(whole, name, *e) for name, e in entries.items()}


def header_length(path, head, size):
    """The JSON header's length from a file's first 8 bytes (`head`), checked against its `size`."""
    if len(head) < 8:
        raise TruncatedFile(f"{path}: {size} bytes, shorter than the 8-byte safetensors header length")
    (n,) = _U64.unpack(head[:8])
    if n > min(MAX_HEADER_BYTES, size - 8):
        raise SafetensorsError(f"{path}: header length {n} exceeds the file ({size} bytes) or "
                               f"the {MAX_HEADER_BYTES}-byte limit")
    return n


@dataclass(frozen=True)
class TensorRecord:
    """A tensor as the header states it, no data: what a memory estimate needs."""

    name: str
    qtype: T
    shape: tuple
    n_bytes: int


def header_records(path, raw, size):
    """{name: TensorRecord} from the JSON header bytes `raw` of a file of `size` bytes, checked as
    open_safetensors checks them; for a file not on this machine (pull reads headers over HTTP)."""
    entries = _layouts(path, _parse_header(path, raw), data_start=8 + len(raw), size=size)
    return {name: TensorRecord(name, qtype, shape, n_bytes) for name, (qtype, shape, _, n_bytes) in entries.items()}


def _parse_header(path, raw):
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: the header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is a JSON {type(header).__name__}, not an object")
    header.pop("__metadata__", None)
    return header


def _layouts(path, header, data_start, size):
    """name -> (qtype, shape, absolute offset, n_bytes), every field checked, no two overlapping."""
    out = {}
    for name, entry in header.items():
        qtype, itemsize = _dtype(path, name, entry)
        shape = _shape(path, name, entry)
        begin, end = _offsets(path, name, entry, size - data_start)
        if end - begin != math.prod(shape) * itemsize:
            raise SafetensorsError(f"{path}: tensor {name!r} of shape {list(shape)} needs "
                                   f"{math.prod(shape) * itemsize} bytes, its offsets span {end - begin}")
        out[name] = (qtype, shape, data_start + begin, end - begin)
    ordered = sorted(out.items(), key=lambda kv: kv[1][2])
    for (a, la), (b, lb) in zip(ordered, ordered[1:]):
        if la[2] + la[3] > lb[2]:
            raise SafetensorsError(f"{path}: tensors {a!r} and {b!r} overlap")
    return out


def _dtype(path, name, entry):
    if not isinstance(entry, dict):
        raise SafetensorsError(f"{path}: entry {name!r} is not an object")
    dtype = entry.get("dtype")
    if dtype not in DTYPES:
        raise UnsupportedTensorType(f"{path}: tensor {name!r} has dtype {dtype!r}; Pantheon loads "
                                    f"{', '.join(DTYPES)} safetensors")
    return DTYPES[dtype]


def _shape(path, name, entry):
    shape = entry.get("shape")
    if (not isinstance(shape, list) or not 1 <= len(shape) <= MAX_DIMS
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d < 2**63 for d in shape)):
        raise SafetensorsError(f"{path}: tensor {name!r} has shape {shape!r}: 1..{MAX_DIMS} positive integers")
    return tuple(shape)


def _offsets(path, name, entry, data_size):
    offs = entry.get("data_offsets")
    if (not isinstance(offs, list) or len(offs) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
            or not 0 <= offs[0] <= offs[1]):
        raise SafetensorsError(f"{path}: tensor {name!r} has data_offsets {offs!r}, not [begin, end]")
    if offs[1] > data_size:
        raise TruncatedFile(f"{path}: tensor {name!r} ends at data byte {offs[1]}, the data has {data_size}")
    return offs


def _view(whole, name, qtype, shape, offset, n_bytes):
    itemsize = DTYPES[qtype.name][1]
    raw = whole[offset:offset + n_bytes]  # [n_bytes] view of the map
    if offset % itemsize:
        # Kernels read F16/F32 elements in place; a misaligned tensor (never written by the
        # safetensors library, which pads the header) gets an aligned copy instead.
        raw = np.frombuffer(bytearray(raw), np.uint8)  # [n_bytes] copy
    raw = raw.reshape(*shape[:-1], shape[-1] * itemsize)  # [*shape[:-1], row_bytes]
    return TensorInfo(name, qtype, shape, offset, raw)
