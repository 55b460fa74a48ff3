"""Repacked weights kept on disk: one sidecar file per model file, mapped zero-copy like the model.

A model's Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K matrices are repacked once (kernels.repack: the file's blocks,
row-interleaved) into DIRECTORY/<stem>-<key>.repack and every later load maps that file: replicas
and restarted workers share its page cache as they share the model's, and the model file's pages
of those tensors go cold. The key hashes the model file's identity (path, device, inode, size, mtime) and
the layout version, so a replaced model file never meets an old sidecar.

Matrices that multiply one input and share a type and width (a block's attn_q, attn_k, attn_v; ffn_gate,
ffn_up) are written back to back as a stack (weights.Stack), which one kernel call reads as one matrix:
decode pays one call, one thread fork and one stream start instead of one per member.

File: MAGIC, a little-endian u32 header length, the JSON header ({"key", "source", "stacks": [[name, ...]],
"tensors": {name: {"qtype", "rows", "cols", "offset", "shape"}}}), then each tensor at a page-aligned
offset, except that a stack's later members follow the one before them directly. A file is
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
from pantheon.engine.kernels.vnni import has_int8_dots
from pantheon.engine.model_weights import map_weights, matrices
from pantheon.engine.weights import Stack

log = logging.getLogger(__name__)

MAGIC = b"PNTHRPK1"
VERSION = 9  # of the layouts in kernels.repack and the stacks: part of every key
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
    if not has_int8_dots():  # the kernels reading the layout need VNNI or AVX2 (kernels.vnni)
        return weights
    targets = [w for w in matrices(weights) if repack.supports(w.qtype, w.cols)]
    if not targets:
        return weights
    directory = pathlib.Path(directory or sizes.REPACK_DIR).expanduser()
    runs = stack_runs(weights.blocks, targets)
    try:
        views, stacks = _load(directory, pathlib.Path(model_path), _ordered(targets, runs), runs)
    except OSError as e:
        log.warning("repacked weights unavailable (%s); %s serves from its file's layout", e, model_path)
        return weights
    return map_weights(weights, lambda w: replace(w, packed=views[w.name], stack=stacks.get(w.name))
                       if w.name in views else w)


def stack_runs(blocks, targets):
    """[(name, ...)]: each block's (attn_q, attn_k, attn_v) and (ffn_gate, ffn_up) split into runs of
    `targets` members that can be read as one matrix, of two or more."""
    packable = {id(w) for w in targets}
    runs = [run for blk in blocks for group in ((blk.wq, blk.wk, blk.wv), (blk.gate, blk.up))
            for run in _runs(group, packable)]
    return [tuple(w.name for w in run) for run in runs if len(run) > 1]


def _runs(group, packable):
    """`group`'s maximal runs of packable matrices in which each follows the one before (_joins)."""
    runs = [[]]
    for w in group:
        if w is None or id(w) not in packable:
            runs.append([])
        elif runs[-1] and not _joins(runs[-1][-1], w):
            runs.append([w])
        else:
            runs[-1].append(w)
    return runs


def _joins(a, b):
    """True when b can follow a in one stack: one type and width, and a ending on a whole task (the kernels
    number a stack's rows straight through its tasks)."""
    return (a.qtype, a.cols) == (b.qtype, b.cols) and a.rows % repack.ROWS == 0


def _ordered(targets, runs):
    """`targets` with each run's members together, in its order, where its first member stood."""
    by_name, first = {w.name: w for w in targets}, {run[0]: run for run in runs}
    later = {name for run in runs for name in run[1:]}
    return [by_name[n] for w in targets if w.name not in later for n in first.get(w.name, (w.name,))]


def sidecar_path(directory, model_path):
    """Where the sidecar of `model_path` lives: the key changes whenever the model file does."""
    st = model_path.stat()
    ident = f"{model_path.resolve()}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{VERSION}"
    return directory / f"{model_path.stem[:48]}-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.repack"


def _load(directory, model_path, targets, runs):
    """({name: read-only packed view}, {first member's name: Stack}) from the sidecar, built under the lock
    when absent or invalid."""
    path = sidecar_path(directory, model_path)
    header = _plan(path, model_path, targets, runs)
    mapped = _open(path, header)
    if mapped is not None:
        return mapped
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released on close: a crashed builder never holds it
        mapped = _open(path, header)
        if mapped is None:
            _build(path, header, targets)
            _prune(directory, keep=path)
            mapped = _open(path, header)
    if mapped is None:
        raise OSError(f"{path} did not read back as written")
    return mapped


def _plan(path, model_path, targets, runs):
    """The header a valid sidecar for `targets` (each run's members together) has: every tensor's place and
    shape, a stack's later members right after the one before (whole tasks of 64-byte multiples: the
    kernels' aligned loads stay aligned)."""
    tensors, offset, later = {}, 0, {name for run in runs for name in run[1:]}
    for w in targets:
        size = repack.nbytes(w.qtype, w.rows, w.cols)
        tasks = -(-w.rows // repack.ROWS)
        offset = offset if w.name in later else -(-offset // ALIGN) * ALIGN
        tensors[w.name] = {"qtype": int(w.qtype), "rows": w.rows, "cols": w.cols, "offset": offset,
                           "shape": [tasks, size // tasks]}
        offset += size
    return {"key": path.stem.rsplit("-", 1)[-1], "source": str(model_path.resolve()),
            "stacks": [list(run) for run in runs], "tensors": tensors}


def _encode(header):
    """MAGIC, u32 length, JSON, padded so tensor offsets (relative to its end) stay page aligned."""
    body = json.dumps(header, sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(body)) + body
    return head + b"\0" * (-len(head) % ALIGN)


def _open(path, header):
    """({name: view}, {first member's name: Stack}) when `path` holds exactly `header`'s sidecar in full,
    else None."""
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
    return views, {run[0]: _stack(mm, len(want), header["tensors"], run) for run in header["stacks"]}


def _stack(mm, start, tensors, run):
    """The Stack of `run`'s members, one view over their back-to-back tasks."""
    first, ts = tensors[run[0]], [tensors[name] for name in run]
    tasks = sum(t["shape"][0] for t in ts)
    view = np.frombuffer(mm, np.uint8, tasks * first["shape"][1], start + first["offset"])
    return Stack(tuple(run), tuple(t["rows"] for t in ts), view.reshape(tasks, first["shape"][1]))


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

