"""numba's cache directory is keyed by every kernel source: a shared helper's edit invalidates its users."""

import os

from pantheon.engine.kernels import compile_cache

JIT_USER = "from pantheon.engine.kernels.jit import kernel\n"


def test_an_edit_of_a_shared_helper_selects_a_fresh_cache_directory(tmp_path, monkeypatch):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "simd.py").write_text("WIDTH = 32\n")
    (tmp_path / "kernels" / "q8dot.py").write_text("from pantheon.engine.kernels.jit import exact\n")
    (tmp_path / "attention.py").write_text(JIT_USER)
    (tmp_path / "scheduler.py").write_text("STEP = 1\n")
    monkeypatch.setattr(compile_cache, "ENGINE", tmp_path)

    def digest():
        compile_cache.source_digest.cache_clear()
        return compile_cache.source_digest()

    try:
        first = digest()
        (tmp_path / "scheduler.py").write_text("STEP = 2\n")  # plain Python: no recompile
        assert digest() == first
        (tmp_path / "kernels" / "simd.py").write_text("WIDTH = 64\n")  # q8dot.py itself is unchanged
        second = digest()
        assert second != first
        (tmp_path / "attention.py").write_text(JIT_USER + "SCALE = 2\n")  # an engine module with kernels
        assert digest() not in (first, second)
    finally:
        compile_cache.source_digest.cache_clear()


def test_prune_keeps_the_active_the_recent_and_the_newest_directories(tmp_path):
    now = 1_000_000_000.0
    day = 86400
    ages = {"active": 40, "new1": 1, "new2": 2, "old1": 10, "old2": 11, "old3": 12, "old4": 13, "old5": 14}
    for name, age in ages.items():
        d = tmp_path / f"numba-{name}"
        d.mkdir()
        (d / "k.nbi").write_bytes(b"x")
        os.utime(d, (now - age * day, now - age * day))
    (tmp_path / "not-a-cache").mkdir()
    compile_cache.prune(tmp_path, tmp_path / "numba-active", now=now)
    left = sorted(p.name for p in tmp_path.iterdir())
    # newest four others (new1, new2, old1, old2) stay; old3..old5 are past a week and beyond them
    assert left == ["not-a-cache", "numba-active", "numba-new1", "numba-new2", "numba-old1", "numba-old2"]


def test_prune_spares_directories_used_within_a_week(tmp_path):
    now = 1_000_000_000.0
    for k in range(8):
        d = tmp_path / f"numba-{k}"
        d.mkdir()
        os.utime(d, (now - k * 3600, now - k * 3600))
    compile_cache.prune(tmp_path, tmp_path / "numba-0", now=now)
    assert len(list(tmp_path.iterdir())) == 8
