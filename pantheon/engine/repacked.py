"""Repacked weights kept on disk: one sidecar file per model file, mapped zero-copy like the model.

A model's Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K matrices are repacked once (kernels.repack: the file's blocks,
row-interleaved) into DIRECTORY/<stem>-<key>.repack and every later load maps that file: replicas
and restarted workers share its page cache as they share the model's, and the model file's pages
of those tensors go cold. The key hashes the model file's identity (path, device, inode, size, mtime) and
the layout version, so a replaced model file never meets an old sidecar.

File: MAGIC, a little-endian u32 header length, the JSON header ({"key", "source", "tensors": {name:
{"qtype", "rows", "cols", "offset", "shape"}}}), then each tensor at a page-aligned offset. A file is
written under another name, fsynced and renamed into place under an exclusive lock, so a reader sees
a whole file or none, and replicas loading at once build it once. Anything wrong with a sidecar (a
short or foreign file, a header that does not match the model) makes it rebuilt; a directory that
cannot take it (read-only, full) leaves the model on its file's layout, logged, never failed.
"""

import fcntl
import hashlib
import json
import logging
import mmap
import os
import pathlib
import shutil
import struct
from dataclasses import replace

import numpy as np

from pantheon.engine import sizes
from pantheon.engine.kernels import repack
from pantheon.engine.kernels.simd import has_vnni
from pantheon.engine.model_weights import map_weights, matrices

log = logging.getLogger(__name__)

MAGIC = b"PNTHRPK1"
VERSION = 5  # of the layouts in kernels.repack: part of every key
ALIGN = 4096
# Rows packed at a time while writing (a multiple of the task's 32): the scratch of a vocabulary-sized
# matrix stays a few MiB.
PACK_ROWS = 4096
# Free space left on the sidecar's file system after writing it, besides the file itself.
SPARE_BYTES = 1 << 30


def attach(weights, model_path, directory=None):
    """`weights` with each Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K matrix's repacked copy bound (Weight.packed), from
    the sidecar in `directory` (None: sizes.REPACK_DIR), written first when absent; `weights` unchanged
    when no matrix qualifies on this host or the sidecar cannot be had (logged)."""
    if not has_vnni():  # the kernels reading the layout are AVX-512 VNNI kernels
        return weights
    targets = [w for w in matrices(weights) if repack.supports(w.qtype, w.cols)]
    if not targets:
        return weights
    directory = pathlib.Path(directory or sizes.REPACK_DIR).expanduser()
    try:
        views = _load(directory, pathlib.Path(model_path), targets)
    except OSError as e:
        log.warning("repacked weights unavailable (%s); %s serves from its file's layout", e, model_path)
        return weights
    return map_weights(weights, lambda w: replace(w, packed=views[w.name]) if w.name in views else w)


def sidecar_path(directory, model_path):
    """Where the sidecar of `model_path` lives: the key changes whenever the model file does."""
    st = model_path.stat()
    ident = f"{model_path.resolve()}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{VERSION}"
    return directory / f"{model_path.stem[:48]}-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.repack"


def _load(directory, model_path, targets):
    """{name: read-only packed view} from the sidecar, built under the lock when absent or invalid."""
    path = sidecar_path(directory, model_path)
    header = _plan(path, model_path, targets)
    views = _open(path, header)
    if views is not None:
        return views
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released on close: a crashed builder never holds it
        views = _open(path, header)
        if views is None:
            _build(path, header, targets)
            _prune(directory, keep=path)
            views = _open(path, header)
    if views is None:
        raise OSError(f"{path} did not read back as written")
    return views


def _plan(path, model_path, targets):
    """The header a valid sidecar for `targets` has: every tensor's place and shape."""
    tensors, offset = {}, 0
    for w in targets:
        size = repack.nbytes(w.qtype, w.rows, w.cols)
        tasks = -(-w.rows // repack.ROWS)
        tensors[w.name] = {"qtype": int(w.qtype), "rows": w.rows, "cols": w.cols, "offset": offset,
                           "shape": [tasks, size // tasks]}
        offset += -(-size // ALIGN) * ALIGN
    return {"key": path.stem.rsplit("-", 1)[-1], "source": str(model_path.resolve()), "tensors": tensors}


def _encode(header):
    """MAGIC, u32 length, JSON, padded so tensor offsets (relative to its end) stay page aligned."""
    body = json.dumps(header, sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(body)) + body
    return head + b"\0" * (-len(head) % ALIGN)


def _open(path, header):
    """{name: view} when `path` holds exactly `header`'s sidecar in full, else None."""
    try:
        with open(path, "rb") as f:
            want = _encode(header)
            if f.read(len(want)) != want:
                return None
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (FileNotFoundError, ValueError):
        return None  # absent, or empty (mmap refuses a zero-length file)
    views = {}
    for name, t in header["tensors"].items():
        count = t["shape"][0] * t["shape"][1]
        if len(want) + t["offset"] + count > len(mm):
            return None
        views[name] = np.frombuffer(mm, np.uint8, count, len(want) + t["offset"]).reshape(t["shape"])
    return views


def _build(path, header, targets):
    """Write the sidecar beside `path` under a private name, fsync it, rename it into place."""
    head = _encode(header)
    last = max(header["tensors"].values(), key=lambda t: t["offset"])
    total = len(head) + last["offset"] + last["shape"][0] * last["shape"][1]
    free = shutil.disk_usage(path.parent).free
    if free < total + SPARE_BYTES:
        raise OSError(f"{path.parent} has {free >> 20} MiB free; the repacked copy needs {total >> 20} MiB "
                      f"and {SPARE_BYTES >> 20} MiB spare")
    log.info("repacking %d matrices (%d MiB) into %s", len(targets), total >> 20, path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(head)
            for w in targets:
                f.seek(len(head) + header["tensors"][w.name]["offset"])
                for r0 in range(0, w.rows, PACK_ROWS):  # tasks are independent: bounded scratch
                    f.write(repack.pack(w.qtype, w.raw[r0:r0 + PACK_ROWS]).data)
            f.truncate(total)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(directory, keep):
    """Remove sidecars whose model file is gone or has changed since (their key no longer matches), and
    dead builders' leftovers: called under the lock, which every builder holds while it writes, so any
    other private file is one. Best effort; a mapped sidecar stays readable after its name goes."""
    for other in directory.glob("*.repack"):
        if other != keep and _stale(directory, other):
            other.unlink(missing_ok=True)
    for tmp in directory.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def _stale(directory, path):
    """True when `path`'s recorded model file no longer has the identity its key was made from."""
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                return True
            (n,) = struct.unpack("<I", f.read(4))
            source = pathlib.Path(json.loads(f.read(n))["source"])
        return sidecar_path(directory, source) != path
    except (OSError, ValueError, KeyError, struct.error):
        return True

