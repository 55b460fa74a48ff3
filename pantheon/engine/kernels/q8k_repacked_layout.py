"""Where the fields of a repacked K-quant super-block lie (kernels.repack), and the quant-word reader
the repacked K-quant kernels share."""

from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels.jit import inline
from pantheon.engine.kernels.repack import LAYOUTS, ROWS
from pantheon.engine.kernels.simd_lanes import hi16, lo16, or16, qbit16, wload16

# Bytes of one super-block of a task's 32 rows, and where its fields start: Q4_K (SC: the file's 12
# packed scale bytes as planes; QS: the quant words), Q5_K (its qh words at QH5, its quant words QH5_BYTES
# later): scales, d and dmin first, so a pass reads a super-block in address order; then Q6_K (quant
# words first: its passes read each quarter's scales after its words).
GB, GB5 = LAYOUTS[T.Q4_K][2] * ROWS, LAYOUTS[T.Q5_K][2] * ROWS
SC, D, DM, QS = 0, 12 * ROWS, 14 * ROWS, 16 * ROWS
QH5, QH5_BYTES = QS, 8 * 4 * ROWS
# Where simd_lanes.k4_planes puts a super-block's decoded mins (its scales from 0), one byte per row, and
# its d and dmin (fp16, D_BYTES each).
MN, KD, D_BYTES = 8 * ROWS, 16 * ROWS, 2 * ROWS
GB6 = LAYOUTS[T.Q6_K][2] * ROWS
SC6, D6 = 6144, 6144 + 16 * ROWS
# Bytes of one quant word of all 32 rows.
WORD = 4 * ROWS


@inline
def qs_at(five):
    """Where a Q4_K (Q5_K when `five`) super-block's quant words start."""
    return QS + (QH5_BYTES if five else 0)


@inline
def quants(five, row, o, at, qt, pr, w):
    """(low, high) quant groups of 16 rows for word w of pair pr (sub-blocks 2pr, 2pr + 1): nibbles of
    the quant word at `at`, and for Q5_K (`five`) each one's fifth bit from qh word w."""
    v = wload16(row, at)
    lo, hi = lo16(v), hi16(v)
    if five:
        qh = wload16(row, o + QH5 + w * WORD + qt)
        lo = or16(lo, qbit16(qh, max(4 - 2 * pr, 0), max(2 * pr - 4, 0)))
        hi = or16(hi, qbit16(qh, max(3 - 2 * pr, 0), max(2 * pr - 3, 0)))
    return lo, hi


@inline
def word6(o, half, w, part):
    """Where Q6_K quant word w (0..7) of `half` lies in the super-block at o: its word of plane `part`
    (kernels.repack: plane p holds values 128·half + 4w.. + 32p in its low 6 bits, the fourth group's
    bits in its top 2; quarter (half, w // 4) keeps its 12 words together, each word's three planes
    back to back)."""
    return o + ((2 * half + w // 4) * 12 + 3 * (w % 4) + part) * WORD


@inline
def words6(row, o, half, w, h):
    """Q6_K quant word w of `half` in the super-block at o, 16 rows from byte h of each word: its words of
    planes 0, 1 and 2 (the three its four 6-bit value groups come from: simd_lanes.six16, six_top16)."""
    at = word6(o, half, w, 0) + h
    return wload16(row, at), wload16(row, at + WORD), wload16(row, at + 2 * WORD)
