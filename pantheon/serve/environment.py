"""The environment variables Pantheon reads, each read here and nowhere else."""

import os
from dataclasses import dataclass
from typing import Optional

from pantheon.errors import UsageError
from pantheon.serve.flag_values import int_in, parse_secret
from pantheon.serve.limits import DEFAULT_BATCH_SLOTS, MAX_BATCH_SLOTS

BATCH_SLOTS_ENV = "QWEN35_BATCH_SLOTS"
REGISTRY_URL_ENV = "PANTHEON_REGISTRY_URL"
REGISTRY_TOKEN_ENV = "PANTHEON_REGISTRY_TOKEN"


def batch_slots_from_env(environ=os.environ):
    """QWEN35_BATCH_SLOTS as a number 1..8 (surrounding spaces ignored); unset or empty: the default."""
    raw = environ.get(BATCH_SLOTS_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_BATCH_SLOTS
    return int_in(1, MAX_BATCH_SLOTS)(BATCH_SLOTS_ENV, raw.strip())


def registry_token_from_env(environ=os.environ):
    """PANTHEON_REGISTRY_TOKEN (the router's shared token, read by both sides), or None when unset/empty."""
    raw = environ.get(REGISTRY_TOKEN_ENV, "").strip()
    return parse_secret(REGISTRY_TOKEN_ENV, raw) if raw else None


def cuda_visible_devices(environ=os.environ):
    """The raw CUDA_VISIBLE_DEVICES string, or None when unset (every device visible)."""
    return environ.get("CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Operations:
    """Operational knobs read from the environment (documented in docs/reliability.md and docs/memory.md)."""

    hang_timeout: float = 10.0  # PANTHEON_HANG_TIMEOUT: a die whose heartbeat is older is stalled, then replaced
    chaos_hooks: bool = False  # PANTHEON_CHAOS_HOOKS=1: workers exit via os._exit on SIGUSR1 (soak tests)
    pressure_file: Optional[str] = None  # PANTHEON_PRESSURE_FILE: "available total" bytes, for tests
    restart_intensity: int = 5  # PANTHEON_RESTART_INTENSITY: more restarts than this per period -> FAILED
    restart_period: float = 60.0  # PANTHEON_RESTART_PERIOD: seconds
    boot_timeout: float = 900.0  # PANTHEON_BOOT_TIMEOUT: a die still loading its models after this is killed
    # PANTHEON_KERNEL_CACHE: where compiled CPU kernels are kept (a subdirectory per engine source digest);
    # unset: NUMBA_CACHE_DIR, else pantheon/engine/kernels/__pycache__ (pantheon.engine.kernels.compile_cache)
    kernel_cache: Optional[str] = None
    # PANTHEON_REPACK_DIR: where Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K weights are kept repacked for the VNNI
    # kernels, one file per model (pantheon.engine.repacked); unset: the engine's default directory; "off":
    # repack False, every model served from its file's own layout
    repack: bool = True
    repack_dir: Optional[str] = None


def _env_number(environ, name, default, kind, hi):
    raw = environ.get(name, "").strip()
    try:
        value = kind(raw) if raw else default
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a number") from None
    if not 0 < value < hi:
        raise UsageError(f"{name}={raw!r}: expected 0 < value < {hi}")
    return value


def operations_from_env(environ=os.environ):
    return Operations(_env_number(environ, "PANTHEON_HANG_TIMEOUT", 10.0, float, 86400),
                      environ.get("PANTHEON_CHAOS_HOOKS", "").strip() == "1",
                      environ.get("PANTHEON_PRESSURE_FILE") or None,
                      _env_number(environ, "PANTHEON_RESTART_INTENSITY", 5, int, 100000),
                      _env_number(environ, "PANTHEON_RESTART_PERIOD", 60.0, float, 86400),
                      _env_number(environ, "PANTHEON_BOOT_TIMEOUT", 900.0, float, 86400),
                      environ.get("PANTHEON_KERNEL_CACHE", "").strip() or None,
                      *repack_from_env(environ))


def repack_from_env(environ=os.environ):
    """PANTHEON_REPACK_DIR as (repack, repack_dir), open_model's arguments: unset or empty -> (True, None:
    the engine's default directory), "off" -> (False, None); read by pantheon-serve and `pantheon`."""
    raw = environ.get("PANTHEON_REPACK_DIR", "").strip()
    if raw.lower() == "off":
        return False, None
    return True, raw or None


def cuda_device_order(environ=os.environ):
    """CUDA_DEVICE_ORDER ('FASTEST_FIRST' when unset, as the CUDA runtime assumes)."""
    return environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")

