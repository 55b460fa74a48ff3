"""Pool: mean, cls, last and none over rows that arrive in chunks equal the same pooling over all rows at once."""

import numpy as np
import pytest

from pantheon.engine.pooling import Pool
from pantheon.errors import EngineError


@pytest.mark.parametrize("how, pick", [("mean", lambda h: h.mean(0)), ("cls", lambda h: h[0]),
                                       ("last", lambda h: h[-1]), ("none", lambda h: h)])
@pytest.mark.parametrize("cuts", [(), (1,), (3, 4), (1, 2, 3, 4, 5, 6)])
def test_chunks_pool_as_one_pass(how, pick, cuts):
    rows = np.random.default_rng(7).standard_normal((7, 16)).astype(np.float32)  # [7, 16]
    pool = Pool(how)
    for chunk in np.split(rows, list(cuts)):
        pool.add(chunk)
    got = pool.vector()
    assert got.dtype == np.float32 and got.shape == pick(rows).shape
    np.testing.assert_allclose(got, pick(rows.astype(np.float64)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["rank", "max", None, ""])
def test_poolings_that_are_not_a_pooling_are_refused(how):
    with pytest.raises(EngineError, match="embed must be"):
        Pool(how)


def test_none_keeps_its_own_copy_of_each_chunk():
    """The model may reuse the buffer it handed over: per-token rows must not change after add()."""
    rows = np.ones((3, 4), np.float32)  # [3, 4]
    pool = Pool("none")
    pool.add(rows)
    rows[:] = 7
    np.testing.assert_array_equal(pool.vector(), np.ones((3, 4), np.float32))
