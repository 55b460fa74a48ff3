"""The front's ring backend: a model's tokenizer and template are ready before its first request."""

import time

import pytest

from pantheon.demo import demo_model_path
from workers.layout import Layout
from workers.ring_backend import RingBackend
from workers.tables import SLOT_LOADED, SLOT_LOADING


@pytest.fixture
def backend():
    layout = Layout.create(1, 1, ["demo"], ["cpu0"])
    backend = RingBackend(layout, 0)
    return backend, layout.tables


def _place(tables, serial, state=SLOT_LOADING):
    tables.write_slot(0, state=state, name="demo", path=str(demo_model_path()), dies=1, ctx_cap=64,
                      batch_slots=2, serial=serial)


def _await_opened(backend, serial, timeout=30.0):
    deadline = time.monotonic() + timeout
    while (0, serial) not in backend._served:
        assert time.monotonic() < deadline, "the prepare thread never opened the slot"
        time.sleep(0.01)
    return backend._served[(0, serial)]


def test_a_slot_is_opened_while_its_model_still_loads_and_kept_once_loaded(backend):
    backend, tables = backend
    _place(tables, serial=1)
    backend.start()
    opened = _await_opened(backend, 1)  # the slot is still LOADING: the worker has not announced it
    assert tables.read_slot(0)["state"] == SLOT_LOADING
    tables.write_slot(0, state=SLOT_LOADED)  # announcing it rewrites the record, not the placement
    assert backend._served_slot(0, tables.read_slot(0)) is opened


def test_a_new_model_in_the_slot_is_opened_afresh_and_the_old_one_let_go(backend):
    backend, tables = backend
    _place(tables, serial=1, state=SLOT_LOADED)
    first = backend._served_slot(0, tables.read_slot(0))
    _place(tables, serial=2)
    backend.start()
    second = _await_opened(backend, 2)
    assert second is not first and list(backend._served) == [(0, 2)]
