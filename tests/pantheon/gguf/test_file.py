"""open_gguf: hostile files refused with typed errors, nothing leaked; valid files match gguf-py."""

import gc
import mmap
import struct
import time

import numpy as np
import psutil
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFWriter

from pantheon.errors import (AbsurdValue, BadMagic, GGUFError, TruncatedFile,
                             UnsupportedTensorType, UnsupportedVersion)
from pantheon.gguf.file import open_gguf
from tests.conftest import SHARED, shared_path
from tests.open_files import fds_on
from tests.pantheon.gguf.craft import VT, gguf_bytes, gstr, kv, kv_array, tinfo


TOKENS = [f"tok{i}\u00e9" for i in range(300)]


def base_kvs():
    return [
        kv("general.architecture", VT.STRING, gstr("llama")),
        kv("llama.block_count", VT.UINT32, struct.pack("<I", 1)),
        kv("llama.rope.freq_base", VT.FLOAT32, struct.pack("<f", 10000.0)),
        kv("tokenizer.ggml.add_bos_token", VT.BOOL, b"\x01"),
        kv("general.file_type", VT.INT64, struct.pack("<q", -7)),
        kv_array("tokenizer.ggml.tokens", VT.STRING, [gstr(t) for t in TOKENS]),
        kv_array("tokenizer.ggml.scores", VT.FLOAT32, [struct.pack("<f", -i) for i in range(300)]),
        kv_array("tokenizer.ggml.token_type", VT.INT32, [struct.pack("<i", 1)] * 300),
        kv_array("flags", VT.BOOL, [b"\x00", b"\x02"]),
    ]


def base_tensors():
    """(name, ne, qtype, bytes): a 1-D F32, a 2-D Q8_0 and a 3-D expert F16 tensor."""
    rng = np.random.default_rng(0)
    return [
        ("output_norm.weight", [64], QT.F32, rng.bytes(64 * 4)),
        ("blk.0.attn_q.weight", [64, 3], QT.Q8_0, rng.bytes(3 * 2 * 34)),
        ("blk.0.ffn_up_exps.weight", [32, 2, 4], QT.F16, rng.bytes(4 * 2 * 32 * 2)),
    ]


def layout(tensors, alignment=32):
    infos, data = [], b""
    for name, ne, qtype, payload in tensors:
        infos.append(tinfo(name, ne, qtype, len(data)))
        data += payload + b"\0" * (-len(payload) % alignment)
    return infos, data


def valid_bytes():
    infos, data = layout(base_tensors())
    return gguf_bytes(base_kvs(), infos, data)


def write(tmp_path, data, name="m.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def mapped(path):
    with open("/proc/self/maps") as f:
        return str(path) in f.read()


def refused(path, cls, *needles):
    """`open_gguf(path)` raises `cls` naming the file and each needle, leaving no fd or map."""
    with pytest.raises(cls) as info:
        open_gguf(path)
    message = str(info.value)
    assert str(path) in message, message
    for needle in needles:
        assert str(needle) in message, (needle, message)
    assert not fds_on(path)
    assert not mapped(path)
    return message


# ---- hostile files ----

def test_empty_file(tmp_path):
    refused(write(tmp_path, b""), TruncatedFile, "0 bytes")


def test_tiny_file(tmp_path):
    refused(write(tmp_path, b"GG"), TruncatedFile, "2 bytes")


def test_bad_magic(tmp_path):
    data = b"GGML" + valid_bytes()[4:]
    refused(write(tmp_path, data), BadMagic, "b'GGML'")


@pytest.mark.parametrize("version", [0, 1, 4, 2**31, 0x03000000])
def test_unsupported_version(tmp_path, version):
    refused(write(tmp_path, gguf_bytes(base_kvs(), [], version=version)), UnsupportedVersion,
            f"version {version}")


def test_version_2_reads(tmp_path):
    infos, data = layout(base_tensors())
    g = open_gguf(write(tmp_path, gguf_bytes(base_kvs(), infos, data, version=2)))
    assert g.version == 2 and len(g.tensors) == 3


def section_bounds():
    """Byte offsets where the KV section, the tensor-info section and the data section start."""
    kvs = b"".join(base_kvs())
    infos, _ = layout(base_tensors())
    kv_start = 24
    ti_start = kv_start + len(kvs)
    ti_end = ti_start + len(b"".join(infos))
    return kv_start, ti_start, ti_end


@pytest.mark.parametrize("cut", [5, 17, 23])
def test_truncated_in_header(tmp_path, cut):
    refused(write(tmp_path, valid_bytes()[:cut]), TruncatedFile, f"{cut} bytes")


@pytest.mark.parametrize("where", ["kv_mid", "kv_end", "ti_start", "ti_end", "data_end"])
def test_truncated_in_sections(tmp_path, where):
    kv_start, ti_start, ti_end = section_bounds()
    data = valid_bytes()
    cut = {"kv_mid": (kv_start + ti_start) // 2, "kv_end": ti_start - 3, "ti_start": ti_start + 5,
           "ti_end": ti_end - 1, "data_end": len(data) - 40}[where]
    refused(write(tmp_path, data[:cut]), TruncatedFile, f"the file has {cut}")


@pytest.mark.parametrize("counts", [(2**40, 9), (3, 2**40), (3, 1000), (2**64 - 1, 2**64 - 1)])
def test_absurd_counts(tmp_path, counts):
    infos, data = layout(base_tensors())
    p = write(tmp_path, gguf_bytes(base_kvs(), infos, data, counts=counts))
    refused(p, AbsurdValue, f"tensor_count {counts[0]}", f"kv_count {counts[1]}")


def test_tensor_count_beyond_infos_is_refused(tmp_path):
    infos, data = layout(base_tensors())
    p = write(tmp_path, gguf_bytes(base_kvs(), infos, data, counts=(5, 9)))
    refused(p, GGUFError, "tensor")


def test_absurd_key_length(tmp_path):
    bad = struct.pack("<Q", 2**62) + b"key"
    refused(write(tmp_path, gguf_bytes([bad] + base_kvs(), [])), AbsurdValue, str(2**62))


def test_absurd_string_value_length(tmp_path):
    bad = kv("general.name", VT.STRING, struct.pack("<Q", 2**40) + b"x")
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), AbsurdValue, str(2**40))


@pytest.mark.parametrize("itype", [VT.UINT8, VT.FLOAT64, VT.STRING])
def test_absurd_array_length(tmp_path, itype):
    bad = kv("general.bad", VT.ARRAY, struct.pack("<IQ", itype, 2**40) + b"\0" * 16)
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), AbsurdValue, str(2**40),
            "'general.bad'")


def test_absurd_string_in_array(tmp_path):
    items = [gstr("ok"), struct.pack("<Q", 2**50) + b"zz"]
    bad = kv_array("tokenizer.ggml.merges", VT.STRING, items)
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), AbsurdValue, str(2**50),
            "element #1")


def test_unknown_value_type(tmp_path):
    bad = kv("general.weird", 13, b"\0" * 8)
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), GGUFError, "is 13")


def test_nested_array(tmp_path):
    bad = kv("general.nested", VT.ARRAY, struct.pack("<IQ", VT.ARRAY, 1) + b"\0" * 32)
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), GGUFError, "'general.nested'")


def test_duplicate_key(tmp_path):
    refused(write(tmp_path, gguf_bytes(base_kvs() + base_kvs()[:1], [])), GGUFError,
            "'general.architecture'")


def test_key_not_utf8(tmp_path):
    bad = gstr(b"general.\xff\xfe") + struct.pack("<I", VT.UINT8) + b"\x01"
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), GGUFError, "UTF-8")


@pytest.mark.parametrize("value,vtype", [(0, VT.UINT32), (48, VT.UINT32), (32, VT.UINT64)])
def test_bad_alignment(tmp_path, value, vtype):
    fmt = "<Q" if vtype == VT.UINT64 else "<I"
    bad = kv("general.alignment", vtype, struct.pack(fmt, value))
    needle = "UINT64" if vtype == VT.UINT64 else str(value)
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), GGUFError, needle)


def one_tensor_file(tmp_path, ne, qtype=QT.F32, offset=0, n_dims=None, name="t.weight"):
    data = b"\0" * 4096
    return write(tmp_path, gguf_bytes(base_kvs(), [tinfo(name, ne, qtype, offset, n_dims)], data))


@pytest.mark.parametrize("ne", [[0, 4], [64, 0], [2**64 - 1, 1], [64, 2**63]])
def test_absurd_dimension(tmp_path, ne):
    refused(one_tensor_file(tmp_path, ne), AbsurdValue, "'t.weight'", str(ne))


def test_too_many_dims(tmp_path):
    refused(one_tensor_file(tmp_path, [1, 1, 1, 1, 1]), AbsurdValue, "n_dims 5")


def test_zero_dims(tmp_path):
    refused(one_tensor_file(tmp_path, [], n_dims=0), AbsurdValue, "n_dims 0")


def test_huge_n_dims(tmp_path):
    refused(one_tensor_file(tmp_path, [4], n_dims=2**31), AbsurdValue, f"n_dims {2**31}")


def test_element_count_overflow(tmp_path):
    refused(one_tensor_file(tmp_path, [2**32, 2**32]), AbsurdValue, "overflow")


def test_tensor_name_too_long(tmp_path):
    refused(one_tensor_file(tmp_path, [4], name="x" * 64), AbsurdValue, "63 bytes")


def test_tensor_name_empty(tmp_path):
    refused(one_tensor_file(tmp_path, [4], name=""), AbsurdValue, "empty")


@pytest.mark.parametrize("type_id", [4, 5, 31, 9999, 2**32 - 1])
def test_type_unknown_to_ggml(tmp_path, type_id):
    refused(one_tensor_file(tmp_path, [256], qtype=type_id), UnsupportedTensorType,
            f"type id {type_id}", "unknown")


@pytest.mark.parametrize("qtype", [QT.IQ2_XXS, QT.Q8_K, QT.I32, QT.Q8_1, QT.F64])
def test_type_without_kernel(tmp_path, qtype):
    refused(one_tensor_file(tmp_path, [256], qtype=qtype), UnsupportedTensorType, qtype.name)


@pytest.mark.parametrize("qtype,cols", [(QT.Q8_0, 48), (QT.Q4_K, 128), (QT.Q4_0, 1)])
def test_cols_not_multiple_of_block(tmp_path, qtype, cols):
    refused(one_tensor_file(tmp_path, [cols, 2], qtype=qtype), AbsurdValue, f"{cols} columns",
            qtype.name)


def test_misaligned_offset(tmp_path):
    refused(one_tensor_file(tmp_path, [4], offset=4), AbsurdValue, "offset 4")


def test_tensor_data_past_end(tmp_path):
    refused(one_tensor_file(tmp_path, [64, 32]), TruncatedFile, "'t.weight'", "8192 bytes")


def test_tensor_offset_absurd(tmp_path):
    refused(one_tensor_file(tmp_path, [4], offset=2**62), AbsurdValue, str(2**62))


def test_overlapping_tensors(tmp_path):
    infos = [tinfo("a.weight", [64], QT.F32, 0), tinfo("b.weight", [64], QT.F32, 128)]
    p = write(tmp_path, gguf_bytes(base_kvs(), infos, b"\0" * 512))
    refused(p, AbsurdValue, "'a.weight'", "'b.weight'", "overlap")


def test_duplicate_tensor_name(tmp_path):
    infos = [tinfo("a.weight", [64], QT.F32, 0), tinfo("a.weight", [64], QT.F32, 256)]
    p = write(tmp_path, gguf_bytes(base_kvs(), infos, b"\0" * 512))
    refused(p, GGUFError, "duplicate tensor name 'a.weight'")


def test_every_truncation_is_refused_cleanly(tmp_path):
    """Any prefix of a valid file is refused with a GGUFError, never another exception."""
    data = valid_bytes()
    p = tmp_path / "cut.gguf"
    for cut in range(0, len(data), 97):
        p.write_bytes(data[:cut])
        with pytest.raises(GGUFError):
            open_gguf(p)


# ---- valid files ----

def test_crafted_file_contents(tmp_path):
    p = write(tmp_path, valid_bytes())
    g = open_gguf(p)
    assert (g.path, g.version, g.alignment) == (str(p), 3, 32)
    m = g.metadata
    assert m["general.architecture"] == "llama" and type(m["llama.block_count"]) is int
    assert m["llama.rope.freq_base"] == 10000.0 and type(m["llama.rope.freq_base"]) is float
    assert m["tokenizer.ggml.add_bos_token"] is True and m["general.file_type"] == -7
    assert m["tokenizer.ggml.tokens"] == TOKENS
    assert m["tokenizer.ggml.scores"].dtype == np.float32 and m["tokenizer.ggml.scores"][5] == -5
    assert m["tokenizer.ggml.token_type"].dtype == np.int32
    assert not m["tokenizer.ggml.scores"].flags.writeable and not m["flags"].flags.writeable
    assert m["flags"].dtype == np.bool_ and m["flags"].tolist() == [False, True]
    with pytest.raises(TypeError):
        m["general.architecture"] = "x"
    assert list(g.tensors) == [t[0] for t in base_tensors()]
    shapes = [(64,), (3, 64), (4, 2, 32)]
    raw_shapes = [(256,), (3, 68), (4, 2, 64)]
    for (name, _, qtype, payload), shape, raw_shape in zip(base_tensors(), shapes, raw_shapes):
        t = g.tensors[name]
        assert (t.qtype, t.shape, t.raw.shape, t.n_bytes) == (qtype, shape, raw_shape, len(payload))
        assert t.raw.tobytes() == payload and not t.raw.flags.writeable


def mmap_base(arr):
    """The object at the end of an array's base chain (np.frombuffer leaves a memoryview there)."""
    while isinstance(arr, np.ndarray):
        arr = arr.base
    return arr.obj if isinstance(arr, memoryview) else arr


def test_raw_views_are_zero_copy(tmp_path):
    g = open_gguf(write(tmp_path, valid_bytes()))
    raws = [t.raw for t in g.tensors.values()]
    assert all(isinstance(mmap_base(r), mmap.mmap) for r in raws)
    assert len({id(mmap_base(r)) for r in raws}) == 1


def test_map_closes_when_tensors_are_dropped(tmp_path):
    p = write(tmp_path, valid_bytes())
    g = open_gguf(p)
    assert mapped(p) and fds_on(p)
    del g
    gc.collect()
    assert not mapped(p) and not fds_on(p)


def test_vocab_only_file_opens_and_holds_no_map(tmp_path):
    p = shared_path("vocab", "ggml-vocab-llama-spm.gguf")
    g = open_gguf(p)
    assert g.tensors == {} and not fds_on(p) and not mapped(p)
    reader = GGUFReader(p)
    assert_metadata_matches(g, reader)


def test_gguf_writer_file(tmp_path):
    p = tmp_path / "w.gguf"
    w = GGUFWriter(p, "llama")
    w.add_uint32("llama.context_length", 128)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "\u4e2d"])
    w.add_tensor("token_embd.weight", np.arange(64 * 5, dtype=np.float32).reshape(5, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    g = open_gguf(p)
    assert g.metadata["llama.context_length"] == 128
    assert g.metadata["tokenizer.ggml.tokens"] == ["a", "b", "\u4e2d"]
    t = g.tensors["token_embd.weight"]
    assert t.shape == (5, 64) and t.raw.shape == (5, 256)
    np.testing.assert_array_equal(t.raw.view(np.float32), np.arange(320).reshape(5, 64))


def assert_metadata_matches(g, reader):
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert list(g.metadata) == list(fields)
    for key, field in fields.items():
        ours, ref = g.metadata[key], field.contents()
        if field.types[0] == VT.ARRAY and field.types[-1] != VT.STRING:
            assert isinstance(ours, np.ndarray) and ours.ndim == 1, key
            np.testing.assert_array_equal(ours, np.array(ref, dtype=ours.dtype), err_msg=key)
        else:
            assert ours == ref and type(ours) is type(ref), key


GOLDEN = sorted(p.name for p in (SHARED / "golden").glob("*.gguf"))


@pytest.mark.parametrize("name", GOLDEN or ["llama-q4_0.gguf"])
def test_golden_model_matches_gguf_reader(name):
    p = shared_path("golden", name)
    g, reader = open_gguf(p), GGUFReader(p)
    assert_metadata_matches(g, reader)
    assert list(g.tensors) == [t.name for t in reader.tensors]
    for ref in reader.tensors:
        t = g.tensors[ref.name]
        assert t.qtype == ref.tensor_type and t.shape == tuple(reversed(ref.shape.tolist()))
        assert t.offset == ref.data_offset and t.n_bytes == ref.n_bytes
        assert isinstance(mmap_base(t.raw), mmap.mmap) and not t.raw.flags.writeable
        assert np.array_equal(t.raw.reshape(-1), ref.data.view(np.uint8).reshape(-1)), t.name


def test_big_vocabulary_opens_fast():
    p = shared_path("vocab", "ggml-vocab-qwen2.gguf")
    start = time.perf_counter()
    g = open_gguf(p)
    seconds = time.perf_counter() - start
    tokens, merges = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.merges"]
    assert len(tokens) == len(g.metadata["tokenizer.ggml.token_type"]) > 150_000
    assert all(m.count(" ") == 1 for m in merges[:1000])
    assert seconds < 3.0, f"{seconds:.2f} s to open a 151k vocabulary"


def test_large_sparse_model_opens_without_reading_tensors(tmp_path):
    """A 600 MB model with a 32k vocabulary: open is quick and leaves tensor pages untouched."""
    vocab = [gstr(f"\u2581token{i}") for i in range(32_000)]
    kvs = base_kvs()[:5] + [kv_array("tokenizer.ggml.tokens", VT.STRING, vocab),
                            kv_array("tokenizer.ggml.scores", VT.FLOAT32, [b"\0\0\0\0"] * 32_000)]
    rows, cols = 4096, 4096
    n_bytes = rows * cols // 32 * 34
    infos = [tinfo(f"blk.{i}.ffn_up.weight", [cols, rows], QT.Q8_0, i * n_bytes) for i in range(34)]
    p = tmp_path / "big.gguf"
    head = gguf_bytes(kvs, infos)
    with open(p, "wb") as f:
        f.write(head)
        f.truncate(len(head) + 34 * n_bytes)
    process = psutil.Process()
    rss = process.memory_info().rss
    start = time.perf_counter()
    g = open_gguf(p)
    seconds = time.perf_counter() - start
    grown = process.memory_info().rss - rss
    assert sum(t.n_bytes for t in g.tensors.values()) > 600e6
    assert grown < 32e6, f"resident memory grew {grown / 1e6:.1f} MB"
    assert seconds < 2.0, f"{seconds:.2f} s to open"


def test_too_many_tensors_is_refused_before_parsing(tmp_path):
    """The issue's 200k-tensor file: refused from the header count, in milliseconds, as AbsurdValue."""
    infos = [tinfo(f"t{i}", [1], QT.F32, 0) for i in range(200_000)]
    p = write(tmp_path, gguf_bytes(base_kvs(), infos))
    started = time.perf_counter()
    refused(p, AbsurdValue, "tensor_count 200000", "at most 65536")
    assert time.perf_counter() - started < 1.0


def test_too_long_metadata_array_is_refused(tmp_path):
    n = (1 << 22) + 1
    bad = kv("big", VT.ARRAY, struct.pack("<IQ", VT.UINT8, n) + b"\0" * n)
    refused(write(tmp_path, gguf_bytes(base_kvs() + [bad], [])), AbsurdValue, "'big'", str(n))
