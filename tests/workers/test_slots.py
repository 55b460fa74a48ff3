"""The slot book: a failed slot's reason is its die's own load error, whichever way the news arrived."""

import pytest

from pantheon.serve.dies import Die
from pantheon.serve.settings import parse_serve_args
from workers.layout import Layout
from workers.slots import SlotBook
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


def test_without_a_load_error_the_exit_status_is_the_reason(book):
    book, tables = book
    book.die_failed(tables, 0, EXIT, notes=((1, 0, "another die's note"),))
    assert _slot(tables) == (SLOT_FAILED, EXIT)
