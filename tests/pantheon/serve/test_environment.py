"""Environment readers: operational knobs, CUDA's variables, the repack directory."""

import pytest

from pantheon.errors import UsageError
from pantheon.serve import environment


@pytest.mark.parametrize("env,hang,chaos", [({}, 10.0, False), ({"PANTHEON_HANG_TIMEOUT": " 2.5 "}, 2.5, False),
                                            ({"PANTHEON_CHAOS_HOOKS": "1"}, 10.0, True),
                                            ({"PANTHEON_CHAOS_HOOKS": "yes"}, 10.0, False)])
def test_operations_from_env(env, hang, chaos):
    ops = environment.operations_from_env(env)
    assert (ops.hang_timeout, ops.chaos_hooks) == (hang, chaos)


@pytest.mark.parametrize("bad", ["soon", "0", "-1", "1e9"])
def test_bad_hang_timeout_refused(bad):
    with pytest.raises(UsageError, match="PANTHEON_HANG_TIMEOUT"):
        environment.operations_from_env({"PANTHEON_HANG_TIMEOUT": bad})


def test_cuda_env_readers():
    assert environment.cuda_visible_devices({}) is None
    assert environment.cuda_visible_devices({"CUDA_VISIBLE_DEVICES": "1,0"}) == "1,0"
    assert environment.cuda_device_order({}) == "FASTEST_FIRST"


@pytest.mark.parametrize("raw,want", [(None, (True, None)), ("", (True, None)), (" /data/rp ", (True, "/data/rp")),
                                      ("off", (False, None)), ("OFF", (False, None))])
def test_repack_dir_from_env(raw, want):
    env = {} if raw is None else {"PANTHEON_REPACK_DIR": raw}
    ops = environment.operations_from_env(env)
    assert (ops.repack, ops.repack_dir) == want


@pytest.mark.parametrize("env,want", [({}, None), ({"PANTHEON_REGISTRY_TOKEN": "  "}, None),
                                      ({"PANTHEON_REGISTRY_TOKEN": " tok-1 "}, "tok-1")])
def test_registry_token(env, want):
    assert environment.registry_token_from_env(env) == want


def test_registry_token_refused_without_echo():
    with pytest.raises(UsageError, match="^PANTHEON_REGISTRY_TOKEN: .*value not shown") as e:
        environment.registry_token_from_env({"PANTHEON_REGISTRY_TOKEN": "two words"})
    assert "two" not in str(e.value)


@pytest.mark.parametrize("raw,slots", [(None, 4), ("", 4), (" 8 ", 8), ("1", 1)])
def test_batch_slots(raw, slots):
    assert environment.batch_slots_from_env({} if raw is None else {"QWEN35_BATCH_SLOTS": raw}) == slots
