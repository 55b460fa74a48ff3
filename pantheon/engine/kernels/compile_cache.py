"""Where numba keeps compiled kernels: a directory named by a hash of every CPU kernel source file.

numba keys a cached function on its own source file only: a kernel in `q8dot.py` compiled against an
intrinsic of `simd.py` would be loaded unchanged after `simd.py` is edited. Naming the whole cache
directory by a digest of every kernel source (kernel_sources) makes any such edit select a fresh,
empty directory, so nothing compiled against an older helper is ever loaded. Directories of older
sources are pruned when a new one is chosen (`prune`: the newest few are kept, and any used within a
week). The directory is chosen when the first kernel is decorated (numba fixes a function's cache
location then), so `configure` must run before the kernel modules are imported.
"""

import functools
import hashlib
import os
import pathlib
import shutil
import time

import numba

ENGINE = pathlib.Path(__file__).resolve().parents[1]  # pantheon/engine

_state = {"base": None, "active": None}
# Pruning: other sources' directories kept regardless (a rollback, a second checkout), and the age in
# seconds past which the rest are removed. Activating a directory refreshes its age.
KEEP_OTHERS, MAX_AGE_S = 4, 7 * 86400


def kernel_sources():
    """Every file numba compiles from: kernels/*.py, and the engine modules that use the jit decorators
    (attention, ops); the rest of the engine (scheduler, sampler, model) is plain Python, and an edit
    there must not cost a recompile of every kernel."""
    users = [p for p in ENGINE.glob("*.py") if "kernels.jit import" in p.read_text()]
    return sorted([*ENGINE.glob("kernels/*.py"), *users])


@functools.lru_cache(maxsize=1)
def source_digest():
    """sha256 (hex, 16 chars) over numba's version and the names and bytes of kernel_sources()."""
    h = hashlib.sha256(numba.__version__.encode())
    for path in kernel_sources():
        h.update(path.relative_to(ENGINE).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _default_base():
    """numba's own NUMBA_CACHE_DIR when set; else __pycache__ beside the kernels, when writable."""
    if numba.config.CACHE_DIR:
        return numba.config.CACHE_DIR
    in_tree = ENGINE / "kernels" / "__pycache__"
    try:
        in_tree.mkdir(exist_ok=True)
        if os.access(in_tree, os.W_OK):
            return str(in_tree)
    except OSError:
        pass
    return str(pathlib.Path.home() / ".cache" / "pantheon" / "kernels")


def configure(base):
    """Keep compiled kernels under `base` (None: the default); call before any kernel module is imported."""
    path = str(pathlib.Path(base).expanduser() / f"numba-{source_digest()}") if base else None
    assert _state["active"] is None or path in (None, _state["active"]), "kernels were decorated already"
    _state["base"] = base


def activate():
    """The keyed cache directory, made numba's CACHE_DIR on the first call (by the jit decorators)."""
    if _state["active"] is None:
        base = pathlib.Path(_state["base"] or _default_base()).expanduser()
        path = base / f"numba-{source_digest()}"
        path.mkdir(parents=True, exist_ok=True)
        os.utime(path)
        numba.config.CACHE_DIR = str(path)
        _state["active"] = str(path)
        prune(base, path)
    return _state["active"]


def prune(base, active, now=None):
    """Remove `numba-*` directories under `base` other than `active` that are neither among the
    KEEP_OTHERS most recently used nor used within MAX_AGE_S. Best effort: a directory another
    process still uses is recompiled into by numba if it goes; failures to remove are ignored."""
    now = time.time() if now is None else now
    try:
        others = [p for p in pathlib.Path(base).glob("numba-*") if p.is_dir() and p != pathlib.Path(active)]
        others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in others[KEEP_OTHERS:]:
        try:
            if now - old.stat().st_mtime > MAX_AGE_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue
