"""A GGUF file opened as hostile input: validated header and metadata, zero-copy tensor views."""

import math
import mmap
import os
import struct
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import numpy as np
from gguf import GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType
from gguf import GGUFValueType as VT

from pantheon.errors import (AbsurdValue, BadMagic, GGUFError, TruncatedFile,
                             UnsupportedTensorType, UnsupportedVersion)
from pantheon.gguf.ggml import SUPPORTED, block_elements, row_bytes

# gguf.GGUFReader is not used: it parses every array element into its own numpy arrays (about 2 s
# for a 32k vocabulary, 11 s for Qwen's 151k here) and loops or over-allocates on hostile counts.

_HEADER = struct.Struct("<IIQQ")  # magic, version, tensor_count, kv_count
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_VERSIONS = (2, 3)
# Smallest possible encodings, to bound the header counts by the file size before parsing:
# a KV is key length + value type + 1 value byte; a tensor info is name length + n_dims + one
# dim + type + offset.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NAME_BYTES = 63  # GGML_MAX_NAME is 64 with the terminating NUL
_INT64_MAX = 2**63 - 1
# Limits no real model comes near (the largest have a few thousand tensors, a 262k vocabulary and
# kilobytes of other metadata); past them a file is refused before any parsing work is done.
MAX_TENSORS = 65536
MAX_KVS = 4096
MAX_ARRAY = 1 << 22  # elements of one metadata array
MAX_METADATA_BYTES = 256 << 20  # the whole metadata section

_SCALARS = {
    VT.UINT8: struct.Struct("<B"), VT.INT8: struct.Struct("<b"),
    VT.UINT16: struct.Struct("<H"), VT.INT16: struct.Struct("<h"),
    VT.UINT32: struct.Struct("<I"), VT.INT32: struct.Struct("<i"),
    VT.UINT64: struct.Struct("<Q"), VT.INT64: struct.Struct("<q"),
    VT.FLOAT32: struct.Struct("<f"), VT.FLOAT64: struct.Struct("<d"),
    VT.BOOL: struct.Struct("<B"),
}
_DTYPES = {
    VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2",
    VT.UINT32: "<u4", VT.INT32: "<i4", VT.UINT64: "<u8", VT.INT64: "<i8",
    VT.FLOAT32: "<f4", VT.FLOAT64: "<f8", VT.BOOL: "<u1",
}


@dataclass(frozen=True, eq=False)
class TensorInfo:
    """One tensor: `shape` in numpy order (outermost first), `raw` its bytes in the file map.

    raw: uint8 [*shape[:-1], row_bytes], read-only, a view of the map (never a copy).
    """

    name: str
    qtype: GGMLQuantizationType
    shape: tuple
    offset: int  # absolute byte offset in the file
    raw: np.ndarray

    @property
    def n_bytes(self) -> int:
        return self.raw.nbytes


@dataclass(frozen=True, eq=False)
class GGUFFile:
    """A validated GGUF file; tensor views keep the map open for as long as they live."""

    path: str
    version: int
    alignment: int
    metadata: Mapping
    tensors: Mapping  # name -> TensorInfo, in file order


@dataclass(frozen=True)
class _Layout:
    """Where one tensor lies, computed and checked before any view of the map exists."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple
    offset: int
    n_bytes: int


def open_gguf(path) -> GGUFFile:
    """Open and validate `path`; a GGUFError subclass names the offending value if it is refused."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        version, n_tensors, n_kv = _read_header(f.read(_HEADER.size), size, path)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        metadata, alignment, layouts = _parse(mm, path, n_tensors, n_kv)
    except BaseException:
        mm.close()  # no view of the map exists yet, so nothing outlives a refusal
        raise
    tensors = _views(mm, layouts)
    if not tensors:
        mm.close()
    return GGUFFile(path, version, alignment, MappingProxyType(metadata), MappingProxyType(tensors))


@dataclass(frozen=True, eq=False)
class GGUFLayout:
    """A GGUF file's header read from its first bytes only: metadata and where each tensor would lie.

    tensors: name -> (name, qtype, shape, offset, n_bytes) records, no data; the layout is checked
    against `file_size`, the whole file's size, so a remote file can be judged before its weights."""

    path: str
    version: int
    file_size: int
    header_bytes: int
    metadata: Mapping
    tensors: Mapping


def read_layout(head, path, file_size) -> GGUFLayout:
    """Parse the GGUF header in `head` (the first bytes of a file of `file_size` bytes).

    TruncatedFile when `head` ends inside the header (read more and call again, up to the whole
    file); the other GGUFError subclasses as open_gguf raises them."""
    path = str(path)
    version, n_tensors, n_kv = _read_header(bytes(head[:_HEADER.size]), file_size, path)
    metadata, _, layouts = _parse(head, path, n_tensors, n_kv, file_size)
    return GGUFLayout(path, version, file_size, _header_end(layouts, file_size), MappingProxyType(metadata),
                      MappingProxyType({t.name: t for t in layouts}))


def _header_end(layouts, file_size):
    return min((t.offset for t in layouts), default=file_size)


def _read_header(head, size, path):
    if len(head) >= 4 and _U32.unpack_from(head)[0] != GGUF_MAGIC:
        raise BadMagic(f"{path}: starts with {head[:4]!r}, not the GGUF magic b'GGUF'")
    if len(head) < _HEADER.size:
        raise TruncatedFile(f"{path}: {size} bytes, shorter than the {_HEADER.size}-byte "
                            f"GGUF header")
    _, version, n_tensors, n_kv = _HEADER.unpack(head)
    if version not in _VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        hint = " (a big-endian file?)" if swapped in _VERSIONS else ""
        raise UnsupportedVersion(f"{path}: GGUF version {version}{hint}; only 2 and 3 are read")
    if n_tensors > MAX_TENSORS or n_kv > MAX_KVS:
        raise AbsurdValue(f"{path}: tensor_count {n_tensors} and kv_count {n_kv}: at most {MAX_TENSORS} "
                          f"tensors and {MAX_KVS} metadata entries are read")
    least = _HEADER.size + n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_INFO_BYTES
    if least > size:
        raise AbsurdValue(f"{path}: tensor_count {n_tensors} and kv_count {n_kv} need at least "
                          f"{least} bytes, the file has {size}")
    return version, n_tensors, n_kv


def _parse(mm, path, n_tensors, n_kv, file_size=None):
    cur = _Cursor(mm, path, _HEADER.size, file_size)
    try:
        metadata, types = _read_metadata(cur, n_kv)
        alignment = _alignment(cur, metadata, types)
        infos = [_read_tensor_info(cur, i) for i in range(n_tensors)]
    except GGUFError:
        raise
    except (struct.error, ValueError, OverflowError, IndexError) as e:
        raise GGUFError(f"{path}: malformed GGUF near byte {cur.pos}: "
                        f"{type(e).__name__}: {e}") from e
    data_start = -(-cur.pos // alignment) * alignment
    return metadata, alignment, _check_layouts(cur, infos, data_start, alignment)


class _Cursor:
    """Little-endian reads from the map that refuse to go past the end of the file."""

    def __init__(self, buf, path, pos, file_size=None):
        # size: the bytes at hand; file_size: the whole file's (larger when only its head is read)
        self.buf, self.path, self.pos, self.size = buf, path, pos, len(buf)
        self.file_size = self.size if file_size is None else file_size

    def refuse(self, cls, message):
        raise cls(f"{self.path}: {message}")

    def take(self, n, what):
        """Start offset of the next `n` bytes; AbsurdValue if no file this size could hold them."""
        if n > self.size - self.pos:
            cls = AbsurdValue if n > self.file_size else TruncatedFile
            self.refuse(cls, f"{what} needs {n} bytes at offset {self.pos}, "
                             f"the file has {self.size}")
        start, self.pos = self.pos, self.pos + n
        return start

    def unpack(self, st, what):
        return st.unpack_from(self.buf, self.take(st.size, what))

    def u32(self, what):
        return self.unpack(_U32, what)[0]

    def u64(self, what):
        return self.unpack(_U64, what)[0]

    def raw_string(self, what):
        n = self.u64(f"length of {what}")
        start = self.take(n, what)
        return self.buf[start:start + n]

    def string(self, what):
        data = self.raw_string(what)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.refuse(GGUFError, f"{what} is not UTF-8 ({e.reason} at byte {e.start}): "
                                   f"{data[:64]!r}")

    def count(self, n, min_bytes, what):
        """Refuse an element count whose smallest encoding exceeds the rest of the file."""
        if n * min_bytes > self.size - self.pos:
            cls = AbsurdValue if n * min_bytes > self.file_size else TruncatedFile
            self.refuse(cls, f"{what} has {n} elements at offset {self.pos}: at least "
                             f"{n * min_bytes} bytes, the file has {self.size}")


def _read_metadata(cur, n_kv):
    metadata, types = {}, {}
    for i in range(n_kv):
        key = cur.string(f"key of metadata entry #{i}")
        if key in metadata:
            cur.refuse(GGUFError, f"duplicate metadata key {key!r} (entry #{i})")
        vtype = _value_type(cur, f"value type of {key!r}")
        metadata[key] = _read_value(cur, vtype, key)
        types[key] = vtype
        if cur.pos > MAX_METADATA_BYTES:
            cur.refuse(AbsurdValue, f"metadata runs past {MAX_METADATA_BYTES} bytes (at entry #{i}, {key!r})")
    return metadata, types


def _value_type(cur, what):
    raw = cur.u32(what)
    try:
        return VT(raw)
    except ValueError:
        cur.refuse(GGUFError, f"{what} is {raw}, not a GGUF value type")


def _read_value(cur, vtype, key):
    if vtype == VT.STRING:
        return cur.string(f"value of {key!r}")
    if vtype == VT.ARRAY:
        return _read_array(cur, key)
    (value,) = cur.unpack(_SCALARS[vtype], f"value of {key!r}")
    return value != 0 if vtype == VT.BOOL else value


def _read_array(cur, key):
    itype = _value_type(cur, f"element type of array {key!r}")
    n = cur.u64(f"length of array {key!r}")
    if itype == VT.ARRAY:
        cur.refuse(GGUFError, f"array {key!r} holds arrays; nested arrays are not supported")
    if n > MAX_ARRAY:
        cur.refuse(AbsurdValue, f"array {key!r} has {n} elements; at most {MAX_ARRAY} are read")
    if itype == VT.STRING:
        cur.count(n, 8, f"string array {key!r}")
        return _read_string_array(cur, n, key)
    dtype = np.dtype(_DTYPES[itype])
    cur.count(n, dtype.itemsize, f"array {key!r}")
    start = cur.take(n * dtype.itemsize, f"array {key!r}")
    values = np.frombuffer(cur.buf[start:cur.pos], dtype)  # [n], read-only, owns a copy
    if itype == VT.BOOL:
        values = values != 0  # [n]
        values.flags.writeable = False
    return values


def _read_string_array(cur, n, key):
    """Decode `n` strings in one tight loop: vocabularies hold 30k to 250k of them."""
    buf, pos, size, unpack = cur.buf, cur.pos, cur.size, _U64.unpack_from
    out = [None] * n
    i = 0
    try:
        for i in range(n):
            (length,) = unpack(buf, pos)
            pos += 8
            if length > size - pos:
                cur.pos = pos
                cur.take(length, f"element #{i} of {key!r}")
            out[i] = str(buf[pos:pos + length], "utf-8")
            pos += length
    except struct.error:
        cur.refuse(TruncatedFile, f"length of element #{i} of {key!r}: the file ends at {size}")
    except UnicodeDecodeError as e:
        cur.refuse(GGUFError, f"element #{i} of {key!r} is not UTF-8 "
                              f"({e.reason} at byte {e.start})")
    cur.pos = pos
    return out


def _alignment(cur, metadata, types):
    if "general.alignment" not in metadata:
        return GGUF_DEFAULT_ALIGNMENT
    value, vtype = metadata["general.alignment"], types["general.alignment"]
    if vtype != VT.UINT32:
        cur.refuse(GGUFError, f"general.alignment has type {vtype.name}, not UINT32")
    if value == 0 or value & (value - 1):
        cur.refuse(AbsurdValue, f"general.alignment {value} is not a power of two")
    return value


def _read_tensor_info(cur, i):
    name = cur.string(f"name of tensor #{i}")
    if not name or len(name.encode()) > _MAX_NAME_BYTES:
        cur.refuse(AbsurdValue, f"tensor #{i} name {name[:80]!r} is empty or over "
                                f"{_MAX_NAME_BYTES} bytes")
    n_dims = cur.u32(f"n_dims of tensor {name!r}")
    if not 1 <= n_dims <= _MAX_DIMS:
        cur.refuse(AbsurdValue, f"tensor {name!r} has n_dims {n_dims}, not 1..{_MAX_DIMS}")
    ne = cur.unpack(struct.Struct(f"<{n_dims}Q"), f"dimensions of tensor {name!r}")
    raw_type = cur.u32(f"type of tensor {name!r}")
    offset = cur.u64(f"offset of tensor {name!r}")
    return name, ne, raw_type, offset


def _check_layouts(cur, infos, data_start, alignment):
    layouts, names = [], set()
    for name, ne, raw_type, offset in infos:
        if name in names:
            cur.refuse(GGUFError, f"duplicate tensor name {name!r}")
        names.add(name)
        qtype = _tensor_type(cur, name, raw_type)
        n_bytes = _tensor_bytes(cur, name, ne, qtype)
        _check_offset(cur, name, offset, n_bytes, data_start, alignment)
        layouts.append(_Layout(name, qtype, tuple(reversed(ne)), data_start + offset, n_bytes))
    _check_overlaps(cur, layouts)
    return layouts


def _tensor_type(cur, name, raw_type):
    try:
        qtype = GGMLQuantizationType(raw_type)
    except ValueError:
        cur.refuse(UnsupportedTensorType,
                   f"tensor {name!r} has type id {raw_type}, unknown to ggml")
    if qtype not in SUPPORTED:
        cur.refuse(UnsupportedTensorType,
                   f"tensor {name!r} has ggml type {qtype.name} ({raw_type}), which Pantheon has "
                   f"no kernel for")
    return qtype


def _tensor_bytes(cur, name, ne, qtype):
    if any(not 1 <= d <= _INT64_MAX for d in ne):
        cur.refuse(AbsurdValue, f"tensor {name!r} has dimensions ne={list(ne)}: each must be "
                                f"in 1..2^63-1")
    n_elements = math.prod(ne)
    if n_elements > _INT64_MAX:
        cur.refuse(AbsurdValue, f"tensor {name!r} has ne={list(ne)}: {n_elements} elements "
                                f"overflow int64")
    block_elems = block_elements(qtype)
    if ne[0] % block_elems:
        cur.refuse(AbsurdValue, f"tensor {name!r} has {ne[0]} columns, not a multiple of "
                                f"{qtype.name}'s block of {block_elems}")
    return n_elements // ne[0] * row_bytes(qtype, ne[0])


def _check_offset(cur, name, offset, n_bytes, data_start, alignment):
    if offset % alignment:
        cur.refuse(AbsurdValue, f"tensor {name!r} offset {offset} is not a multiple of the "
                                f"alignment {alignment}")
    end = data_start + offset + n_bytes
    if end > cur.file_size:
        cls = AbsurdValue if max(offset, n_bytes) > cur.file_size else TruncatedFile
        cur.refuse(cls, f"tensor {name!r} ({n_bytes} bytes at data offset {offset}) ends at "
                        f"byte {end}, the file has {cur.file_size}")


def _check_overlaps(cur, layouts):
    ordered = sorted(layouts, key=lambda t: t.offset)
    for a, b in zip(ordered, ordered[1:]):
        if a.offset + a.n_bytes > b.offset:
            cur.refuse(AbsurdValue, f"tensors {a.name!r} (bytes {a.offset}..{a.offset + a.n_bytes})"
                                    f" and {b.name!r} (from byte {b.offset}) overlap")


def _views(mm, layouts):
    if not layouts:
        return {}
    whole = np.frombuffer(mm, np.uint8)  # [file_size], read-only view of the map
    tensors = {}
    for t in layouts:
        raw_shape = (*t.shape[:-1], row_bytes(t.qtype, t.shape[-1]))
        raw = whole[t.offset:t.offset + t.n_bytes].reshape(raw_shape)  # [*shape[:-1], row_bytes]
        tensors[t.name] = TensorInfo(t.name, t.qtype, t.shape, t.offset, raw)
    return tensors
