"""GGUF files written byte by byte, so tests can corrupt any field on purpose."""

import struct

from gguf import GGUFValueType as VT

__all__ = ["VT", "gguf_bytes", "gstr", "kv", "kv_array", "tinfo"]


def gstr(s):
    data = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(data)) + data


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_array(key, itype, items):
    return kv(key, VT.ARRAY, struct.pack("<IQ", itype, len(items)) + b"".join(items))


def tinfo(name, ne, qtype, offset, n_dims=None):
    n_dims = len(ne) if n_dims is None else n_dims
    return (gstr(name) + struct.pack("<I", n_dims) + struct.pack(f"<{len(ne)}Q", *ne)
            + struct.pack("<IQ", int(qtype), offset))


def gguf_bytes(kvs, infos, data=b"", version=3, counts=None, alignment=32):
    n_tensors, n_kv = counts or (len(infos), len(kvs))
    head = struct.pack("<4sIQQ", b"GGUF", version, n_tensors, n_kv)
    head += b"".join(kvs) + b"".join(infos)
    pad = -len(head) % alignment
    return head + b"\0" * pad + data
