"""The slot book: a failed slot's reason is its die's own load error, whichever way the news arrived."""

import pytest

from pantheon.serve.dies import Die
from pantheon.serve.settings import parse_serve_args
from workers.layout import Layout
from workers.slots import SlotBook, record, spec_of, with_pooling
from workers.tables import DIE_FAILED, SLOT_FAILED, text

LOAD_ERROR = "failed: UnsupportedDevice: cuda0: CuPy is not installed"
EXIT = "worker of die cpu0 (pid 7) exited with 3"


@pytest.fixture
def book(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    dies = [Die("cpu0", "cpu", 0, cores=(0,))]
    config = parse_serve_args(["--model", str(tmp_path / "m.gguf"), "--name", "m"], {})
    book = SlotBook(config, dies)
    layout = Layout.create(1, 1, ["m"], [d.name for d in dies], dies)
    book.publish(layout.tables)
    layout.tables.dies[0]["state"] = DIE_FAILED
    return book, layout.tables


def _slot(tables):
    rec = tables.read_slot(0)
    return rec["state"], text(rec["reason"])


def test_the_load_error_in_the_die_notes_names_the_cause(book):
    book, tables = book
    book.die_failed(tables, 0, EXIT, notes=((0, 0, LOAD_ERROR),))
    assert _slot(tables) == (SLOT_FAILED, LOAD_ERROR)


def test_a_load_error_recorded_earlier_is_not_replaced_by_the_exit_status(book):
    book, tables = book
    assert book.refresh(tables, ((0, 0, LOAD_ERROR),)) == [("m", SLOT_FAILED)]
    book.die_failed(tables, 0, EXIT, notes=())
    assert _slot(tables) == (SLOT_FAILED, LOAD_ERROR)


def test_a_load_error_that_arrives_after_the_failed_bit_still_becomes_the_reason(book):
    """The supervisor may read a die's failed bit before the dispatcher has taken the die's note."""
    book, tables = book
    assert book.refresh(tables, ()) == [("m", SLOT_FAILED)]
    assert _slot(tables) == (SLOT_FAILED, "")
    assert book.refresh(tables, ((0, 0, LOAD_ERROR),)) == []
    assert _slot(tables) == (SLOT_FAILED, LOAD_ERROR)


def test_without_a_load_error_the_exit_status_is_the_reason(book):
    book, tables = book
    book.die_failed(tables, 0, EXIT, notes=((1, 0, "another die's note"),))
    assert _slot(tables) == (SLOT_FAILED, EXIT)


@pytest.mark.parametrize("pooling", ["", "none", "mean", "cls", "last", "rank"])
def test_pooling_goes_through_the_slot_record_and_overrides_the_files(tmp_path, pooling):
    import dataclasses

    import numpy as np

    from pantheon.gguf.config import ModelConfig
    from workers.tables import SLOT_DTYPE

    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    argv = ["--model", str(tmp_path / "m.gguf")] + (["--pooling", pooling] if pooling else [])
    spec = parse_serve_args(argv, {}).models[0]
    rec = np.zeros(1, SLOT_DTYPE)[0]
    for key, value in record(spec, 1, "", 4, False).items():
        rec[key] = value
    back = spec_of(rec, ["cpu0"])[0]
    assert back == dataclasses.replace(spec, dies=back.dies) and tuple(back.dies) == spec.dies
    cfg = ModelConfig("llama", "m", 32, 64, 8, 1, 1, 1, 8, 16, 1e-5, 1e4, 8, False, pooling="mean")
    assert with_pooling(cfg, rec) == dataclasses.replace(cfg, pooling=pooling or "mean")
