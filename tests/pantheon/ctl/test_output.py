"""pantheon-ctl rendering: tables from the documented admin payloads, byte sizes, JSON of dataclasses."""

import enum
import json
from dataclasses import dataclass

import pytest

from pantheon.ctl import output as fmt
from tests.pantheon.ctl.stub import DIES, HEALTH, MODELS


def test_models_table_by_slot_with_reason_line():
    assert fmt.models_table(MODELS) == (
        "NAME    STATE    DIES       IN-FLIGHT  CTX   PATH\n"
        "big     loaded   cpu0,cpu1  3          4096  /models/big.gguf\n"
        "small   loading  cpu1       0          2048  /models/small.gguf\n"
        "broken  failed   cpu0       0          4096  /models/broken.gguf\n"
        "broken: failed: worker exited with signal 9\n")


def test_models_table_empty():
    assert fmt.models_table({"models": []}) == "no models\n"


def test_dies_table_memory_and_pressure():
    assert fmt.dies_table(DIES) == (
        "DIE    KIND  STATE  PID   RESTARTS  IN-FLIGHT  MODELS      MEMORY\n"
        "cpu0   cpu   up     4242  1         3          big,broken  ram 12.0 GiB free of 32.0 GiB\n"
        "cuda0  cuda  down   -     0         0          -           vram 1.5 GiB used of 141.0 GiB\n"
        "pressure: WATCH (available=12884901888)\n")


def test_die_without_memory_numbers():
    assert fmt.die_memory({"ram": None, "vram": None}) is None


def test_health_table_mapping_form():
    assert fmt.health_table(HEALTH) == (
        "status: ok\n"
        "NAME  STATE   REPLICAS  CTX   RUNNING  QUEUED\n"
        "big   loaded  1         4096  2        1\n")


def test_health_table_list_form():
    payload = {"status": "unavailable", "models": [{"name": "a", "state": "loading", "ctx": 512, "in_flight": 0}]}
    assert fmt.health_table(payload) == (
        "status: unavailable\n"
        "NAME  STATE    REPLICAS  CTX  RUNNING  QUEUED\n"
        "a     loading  -         512  0        -\n")


def test_health_table_without_models():
    assert fmt.health_table({"status": "unavailable", "models": {}}) == "status: unavailable\nno models\n"


def test_model_and_unload_lines():
    big = MODELS["models"][1]
    assert fmt.model_line("loaded", big) == "loaded big on cpu0,cpu1 (slot 0, ctx 4096, loaded)\n"
    assert fmt.unloaded_line({"model": big, "aborted": 2}) == "unloaded big (2 in-flight request(s) aborted)\n"


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                    (3 << 29, "1.5 GiB"), (5 << 40, "5.0 TiB"), (None, "-"), (True, "-")])
def test_human_bytes(n, text):
    assert fmt.human_bytes(n) == text


@pytest.mark.parametrize("value,text", [(None, "-"), ("", "-"), ([], "-"), (0, "0"), (["a", "b"], "a,b"),
                                        ("red\x1b[31m", "red\\x1b[31m"), ("tab\there", "tab\\there")])
def test_cells_are_printable(value, text):
    assert fmt.cell(value) == text


def test_table_has_no_trailing_spaces():
    text = fmt.table(("A", "LONG-HEADER"), [("xxxxx", None)])
    assert text == "A      LONG-HEADER\nxxxxx  -\n"


def test_numbers_lines_are_bytes():
    text = fmt.numbers_lines({"weights": 3 << 30, "kv": 1536, "runtime": 0, "note": "mmap shared"})
    assert text == ("  weights      3.0 GiB (3,221,225,472 bytes)\n"
                    "  kv           1.5 KiB (1,536 bytes)\n"
                    "  runtime          0 B (0 bytes)\n"
                    "  note     mmap shared\n")
    assert fmt.numbers_lines({}) == ""


class _Kind(enum.Enum):
    TIGHT = "FITS-TIGHT"


@dataclass(frozen=True)
class _Verdict:
    kind: _Kind
    numbers: dict


def test_to_json_of_dataclasses_and_enums():
    text = fmt.to_json({"v": _Verdict(_Kind.TIGHT, {"need_bytes": 1}), "t": (1, 2), "p": object})
    assert json.loads(text) == {"v": {"kind": "FITS-TIGHT", "numbers": {"need_bytes": 1}}, "t": [1, 2],
                                "p": str(object)}
