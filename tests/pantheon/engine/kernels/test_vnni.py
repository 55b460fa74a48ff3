"""kernels.vnni: vpdpbusd, vpdpwssd and the scaled pair sums, as the host runs them and as AVX2's sequence,
against integer sums."""

import llvmlite.binding as llb
import numba
import numpy as np
import pytest

from pantheon.engine.kernels import vnni
from pantheon.engine.kernels.simd import bits32, dot4, flip_sign
from pantheon.engine.kernels.simd512 import isum8, izero16
from pantheon.engine.kernels.simd_f32 import isum16
from pantheon.engine.kernels.simd_lanes import (pdot16, pmac16, pwords16, qdot16, qstart16, sbload16, wdot16,
                                                wload16)


@pytest.fixture(params=["host", "avx2"])
def form(request, monkeypatch):
    """Each test with this host's form and with AVX2's, forced (a VNNI host runs AVX2 code too); the
    intrinsics pick their form when numba compiles them, so every test compiles its own functions."""
    if not vnni.has_int8_dots():
        pytest.skip("host has neither AVX512-VNNI nor AVX2")
    if request.param == "avx2":
        if not llb.get_host_cpu_features().get("avx2"):
            pytest.skip("host has no AVX2")
        monkeypatch.setattr(vnni, "has_vnni", lambda: False)
    return request.param


def _dot4_sums():
    @numba.njit
    def narrow(u, s, out):
        for k in range(len(out)):
            out[k] = isum8(dot4(bits32(u, 32 * k, 0, 255), bits32(s, 32 * k, 0, 255)))

    @numba.njit
    def wide(q, s, out):
        for k in range(len(out)):
            out[k] = isum8(dot4(flip_sign(bits32(q, 32 * k, 0, 255)), bits32(s, 32 * k, 0, 255)))
    return narrow, wide


def _extremes(rng, lo, hi, count):
    """count·32 bytes in [lo, hi]: the first groups at the ends of the range (the sums that saturate a
    careless int16 pair), then random ones."""
    v = rng.integers(lo, hi + 1, count * 32)  # [count·32]
    v[:32], v[32:64] = hi, lo
    return v


def test_dot4_equals_the_integer_dot_for_quants_below_128(form):
    rng = np.random.default_rng(0)
    u, s = _extremes(rng, 0, 127, 64), _extremes(rng, -128, 127, 64)  # [2048] each
    s[:64] = np.tile([-128, 127], 32)
    out = np.empty(64, np.int32)
    _dot4_sums()[0](u.astype(np.uint8), s.astype(np.int8).view(np.uint8), out)
    np.testing.assert_array_equal(out, (u * s).reshape(64, 32).sum(1))


def test_dot4_on_flipped_bytes_equals_the_integer_dot_for_any_byte(form):
    """Q8_0's q + 128 reaches 255: an unsplit vpmaddubsw pair would saturate at 2·255·127."""
    rng = np.random.default_rng(1)
    q, s = _extremes(rng, -128, 127, 64), _extremes(rng, -128, 127, 64)  # [2048] each
    out = np.empty(64, np.int32)
    _dot4_sums()[1](q.astype(np.int8).view(np.uint8), s.astype(np.int8).view(np.uint8), out)
    np.testing.assert_array_equal(out, ((q + 128) * s).reshape(64, 32).sum(1))


def _qdot16_sum():
    @numba.njit
    def run(w, x, xsum, out):
        for k in range(len(out)):
            acc = qstart16(128, xsum[k])
            for j in range(8):
                acc = qdot16(acc, wload16(w, 64 * (8 * k + j)), x, 4 * (8 * k + j))
            out[k] = isum16(acc)
    return run


def test_qdot16_from_qstart16_equals_the_signed_integer_dot(form):
    """Q8_0's q + 128 words: vpdpbusd after the −128·Σx start (VNNI), or AVX2's sign-moved Σq·x from 0,
    exact for any q byte and activations in −127..127 (what the quantizer makes)."""
    rng = np.random.default_rng(2)
    u, x = _extremes(rng, 0, 255, 16 * 32), _extremes(rng, -127, 127, 32)  # [16384], [1024]
    u[512:576] = 0  # q = −128 against x = −127 (group 1's first word; group 0's meets 127)
    out = np.empty(32, np.int32)
    xsum = x.reshape(32, 32).sum(1).astype(np.int32)  # [32] Σx of each group's 8 words
    _qdot16_sum()(u.astype(np.uint8).view(np.int8), x.astype(np.int8).view(np.uint8), xsum, out)
    rows = u.reshape(32, 8, 16, 4) - 128  # [group, word, row, byte] the signed quants
    want = (rows * x.reshape(32, 8, 1, 4)).sum((1, 2, 3))  # [32]
    np.testing.assert_array_equal(out, want)


def test_wdot16_equals_the_integer_pair_products(form):
    @numba.njit
    def run(pairs, bs, out):
        for k in range(len(out)):
            out[k] = isum16(wdot16(izero16(), wload16(pairs, 64 * k), bs, 2 * k))

    rng = np.random.default_rng(3)
    a = rng.integers(-32768, 32768, (8, 32))  # [8, 16 lanes · 2 int16]
    b = rng.integers(-128, 128, 16)  # [8 · 2] activation sums' range
    a[0], b[:2] = -32768, 127
    out = np.empty(8, np.int32)
    run(a.astype(np.int16).view(np.uint8).reshape(-1), b.astype(np.int16), out)
    np.testing.assert_array_equal(out, (a.reshape(8, 16, 2) * b.reshape(8, 1, 2)).sum((1, 2)))


def _scaled_pairs():
    @numba.njit
    def run(bits, w, x, sc, out):
        for k in range(len(out)):
            acc, step = izero16(), pwords16(bits)
            for j0 in range(0, 8, step):
                part = izero16()
                for j in range(j0, j0 + step):
                    part = pdot16(part, wload16(w, 64 * (8 * k + j)), x, 4 * (8 * k + j))
                acc = pmac16(acc, part, sbload16(sc, 16 * (8 * k + j0)))
            out[k] = isum16(acc)
    return run


@pytest.mark.parametrize("bits", [4, 5, 6])
def test_pdot16_words_scaled_by_pmac16_equal_the_integer_dot(form, bits):
    """pwords16(bits) words of the largest quants against ±128 activations: AVX2's int16 pair sums must
    neither saturate nor wrap before pmac16 scales them."""
    rng = np.random.default_rng(4 + bits)
    top, groups = (1 << bits) - 1, 32
    w = rng.integers(0, top + 1, (groups, 8, 16, 4))  # [group, word, row, byte]
    x = rng.integers(-128, 128, (groups, 8, 4))  # [group, word, byte]
    sc = rng.integers(-128, 128, (groups, 8, 16))  # [group, word (the scale of a run from it), row]
    w[:2], x[0], x[1], sc[0, :, 0], sc[1, :, 0] = top, 127, -128, -128, 127
    out = np.empty(groups, np.int32)
    _scaled_pairs()(bits, w.astype(np.uint8).reshape(-1), x.astype(np.int8).view(np.uint8).reshape(-1),
                    sc.astype(np.int8).view(np.uint8).reshape(-1), out)
    step = vnni.pair_words(bits)
    dots = (w * x[:, :, None, :]).sum(3)  # [group, word, row]
    runs = dots.reshape(groups, 8 // step, step, 16).sum(2)  # [group, run, row]
    np.testing.assert_array_equal(out, (runs * sc[:, ::step]).sum((1, 2)))
