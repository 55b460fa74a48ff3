"""Repacked sidecar files: built once, reused, rebuilt when stale or damaged, never a reason to fail."""

import logging
import multiprocessing
import os
import shutil

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pantheon.demo import demo_model_path
from pantheon.engine import repacked
from pantheon.engine.kernels import matmul
from pantheon.engine.kernels.vnni import has_int8_dots
from pantheon.engine.model import open_model
from pantheon.engine.model_weights import Block, matrices
from pantheon.engine.weights import Weight

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="the repacked kernels need AVX512-VNNI or AVX2")

TOKENS = [1, 5, 9, 200, 17, 3]


@pytest.fixture
def model_file(tmp_path):
    """A private copy of the demo model (Q8_0), so its identity can change."""
    path = tmp_path / "demo.gguf"
    shutil.copyfile(demo_model_path(), path)
    return path


@pytest.fixture(scope="module")
def reference():
    """Logits of the demo model from its file's own layout."""
    return open_model(str(demo_model_path()), threads=2, repack=False).logits(TOKENS)


def sidecars(directory):
    return sorted(directory.glob("*.repack"))


def test_every_matrix_is_served_repacked_with_the_same_logits(model_file, tmp_path, reference):
    model = open_model(str(model_file), threads=2, repack_dir=tmp_path / "rp")
    assert all(w.packed is not None for w in matrices(model.weights))
    assert model.weights.output is model.weights.token_embd  # the demo ties them: still one Weight
    np.testing.assert_array_equal(model.logits(TOKENS), reference)
    assert len(sidecars(tmp_path / "rp")) == 1


def test_a_second_open_maps_the_same_file(model_file, tmp_path):
    open_model(str(model_file), repack_dir=tmp_path / "rp")
    (first,) = sidecars(tmp_path / "rp")
    stamp = first.stat()
    model = open_model(str(model_file), repack_dir=tmp_path / "rp")
    assert sidecars(tmp_path / "rp") == [first]
    assert (first.stat().st_ino, first.stat().st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)
    w = matrices(model.weights)[0]
    assert not w.packed.flags.owndata and not w.packed.flags.writeable  # a view of the mapped file


def test_a_changed_model_file_gets_a_new_sidecar_and_the_old_one_goes(model_file, tmp_path):
    open_model(str(model_file), repack_dir=tmp_path / "rp")
    (old,) = sidecars(tmp_path / "rp")
    os.utime(model_file, ns=(0, 10 ** 18))
    open_model(str(model_file), repack_dir=tmp_path / "rp")
    (new,) = sidecars(tmp_path / "rp")
    assert new != old


@pytest.mark.parametrize("damage", ["truncate", "header", "empty"])
def test_a_damaged_sidecar_is_rebuilt(model_file, tmp_path, reference, damage):
    open_model(str(model_file), repack_dir=tmp_path / "rp")
    (path,) = sidecars(tmp_path / "rp")
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "header":
        path.write_bytes(data[:20] + b"X" + data[21:])
    else:
        path.write_bytes(b"")
    model = open_model(str(model_file), repack_dir=tmp_path / "rp")
    assert path.read_bytes() == data
    np.testing.assert_array_equal(model.logits(TOKENS), reference)


def test_an_unusable_directory_serves_the_file_layout(model_file, tmp_path, reference, caplog):
    (tmp_path / "file").write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="pantheon.engine.repacked"):
        model = open_model(str(model_file), repack_dir=tmp_path / "file" / "rp")
    assert all(w.packed is None for w in matrices(model.weights))
    assert "repacked weights unavailable" in caplog.text
    np.testing.assert_array_equal(model.logits(TOKENS), reference)


def test_too_little_disk_space_is_refused_before_writing(model_file, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(repacked, "SPARE_BYTES", shutil.disk_usage(tmp_path).free + 1)
    with caplog.at_level(logging.WARNING, logger="pantheon.engine.repacked"):
        model = open_model(str(model_file), repack_dir=tmp_path / "rp")
    assert all(w.packed is None for w in matrices(model.weights))
    assert "MiB free" in caplog.text
    assert not sidecars(tmp_path / "rp") and not list((tmp_path / "rp").glob(".*.tmp"))


def test_off_reads_the_file_layout(model_file, tmp_path):
    model = open_model(str(model_file), repack=False, repack_dir=tmp_path / "rp")
    assert all(w.packed is None for w in matrices(model.weights)) and not (tmp_path / "rp").exists()


def _open_in_child(path, directory, out):
    model = open_model(path, threads=1, repack_dir=directory)
    out.put(model.logits(TOKENS).tobytes())


def test_replicas_loading_at_once_build_one_file(model_file, tmp_path, reference):
    ctx = multiprocessing.get_context("spawn")  # fork after numba's OpenMP pool is unsafe
    out = ctx.Queue()
    procs = [ctx.Process(target=_open_in_child, args=(str(model_file), tmp_path / "rp", out)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(r == reference.tobytes() for r in results)
    assert len(sidecars(tmp_path / "rp")) == 1 and not list((tmp_path / "rp").glob(".*.tmp"))


def test_leftovers_of_a_dead_builder_and_orphans_are_pruned(model_file, tmp_path):
    rp = tmp_path / "rp"
    rp.mkdir()
    (rp / ".x.repack.999999999.tmp").write_bytes(b"partial")  # a builder that died mid-write
    gone = tmp_path / "gone.gguf"
    shutil.copyfile(model_file, gone)
    open_model(str(gone), repack_dir=rp)
    gone.unlink()
    open_model(str(model_file), repack_dir=rp)
    assert [p.name.startswith("demo-") for p in sidecars(rp)] == [True]
    assert not list(rp.glob(".*.tmp"))


def test_same_input_matrices_are_stacked_back_to_back_in_the_sidecar(model_file, tmp_path):
    model = open_model(str(model_file), threads=2, repack_dir=tmp_path / "rp")
    for blk in model.weights.blocks:
        for members in ((blk.wq, blk.wk, blk.wv), (blk.gate, blk.up)):
            s = members[0].stack
            assert s.names == tuple(w.name for w in members) and s.rows == tuple(w.rows for w in members)
            assert all(w.stack is None for w in members[1:])
            np.testing.assert_array_equal(s.packed, np.concatenate([w.packed for w in members]))
            assert not s.packed.flags.owndata and not s.packed.flags.writeable  # a view of the mapped file
            for a, b in zip(members, members[1:]):  # each member starts where the one before ends
                assert a.packed.ctypes.data + a.packed.nbytes == b.packed.ctypes.data
            assert s.packed.ctypes.data % 64 == 0 == members[-1].packed.ctypes.data % 64
        assert blk.wo.stack is None and blk.down.stack is None


@pytest.mark.parametrize("n", [1, 3, matmul.STACK_MAX_BATCH + 1])
def test_a_stack_s_one_call_gives_its_members_bits(model_file, tmp_path, n):
    blk = open_model(str(model_file), threads=2, repack_dir=tmp_path / "rp").weights.blocks[0]
    x = np.random.default_rng(n).standard_normal((n, blk.wq.cols)).astype(np.float32)  # [n, dim]
    ws = (blk.wq, blk.wk, blk.wv, blk.wo, blk.gate, blk.up)
    for got, w in zip(matmul.qmatmul(ws, x), ws):
        assert got.shape == (n, w.rows) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, matmul.qmatmul([w], x)[0])


def _weight(name, qtype, rows, cols=256):
    return Weight(name, int(qtype), rows, cols, np.zeros((rows, 1), np.uint8))


def test_stacks_split_where_type_or_width_changes_or_a_member_ends_mid_task():
    q, k, v6 = _weight("q", T.Q4_K, 64), _weight("k", T.Q4_K, 32), _weight("v", T.Q6_K, 32)
    g, u = _weight("g", T.Q4_K, 40), _weight("u", T.Q4_K, 64)  # g ends 8 rows into a task
    blocks = [Block(None, None, None, wq=q, wk=k, wv=v6, gate=g, up=u)]
    assert repacked.stack_runs(blocks, [q, k, v6, g, u]) == [("q", "k")]
    wide = _weight("k", T.Q4_K, 32, cols=512)
    blocks = [Block(None, None, None, wq=q, wk=wide, wv=_weight("v", T.Q4_K, 32, cols=512))]
    assert repacked.stack_runs(blocks, [q, wide, blocks[0].wv]) == [("k", "v")]
    assert repacked.stack_runs(blocks, [q, blocks[0].wv]) == []  # k not repacked: no run spans it
