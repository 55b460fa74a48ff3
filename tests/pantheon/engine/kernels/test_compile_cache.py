"""numba's cache directory is keyed by every kernel source: a shared helper's edit invalidates its users."""

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
