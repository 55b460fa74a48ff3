"""Repacked sidecar files: built once, reused, rebuilt when stale or damaged, never a reason to fail."""

import logging
import multiprocessing
import os
import shutil

import numpy as np
import pytest

from pantheon.demo import demo_model_path
from pantheon.engine import repacked
from pantheon.engine.kernels import q8dot
from pantheon.engine.model import open_model
from pantheon.engine.model_weights import matrices

pytestmark = pytest.mark.skipif(not q8dot.has_vnni(), reason="the repacked kernels need AVX512-VNNI")

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
