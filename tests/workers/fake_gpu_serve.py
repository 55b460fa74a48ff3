"""pantheon-serve with a stand-in NVML that reports GPUs, so CUDA dies exist on a machine without one.

The die workers then run the GPU engine in numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, which the
test environment sets). argv: the number of fake GPUs, then pantheon-serve's own arguments.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.pantheon.serve.test_dies import GIB, FakeNVML  # noqa: E402
from workers.serve import main  # noqa: E402

if __name__ == "__main__":
    n = int(sys.argv[1])
    sys.modules["pynvml"] = FakeNVML([(f"GPU-{k:08x}-0000-0000-0000-{k:012x}", f"Simulated GPU {k}", 80 * GIB,
                                       GIB) for k in range(n)])
    sys.exit(main(sys.argv[2:]))
