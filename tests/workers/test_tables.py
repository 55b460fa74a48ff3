"""The shared slot table: names and paths fit by validation (never cut), reasons are cut on a character."""

import pytest

from pantheon.serve.limits import MAX_NAME_BYTES, MAX_PATH_BYTES
from workers.layout import Layout
from workers.tables import REASON_BYTES, SLOT_DTYPE, text


def test_the_table_holds_exactly_the_settings_limits():
    assert (SLOT_DTYPE["name"].itemsize, SLOT_DTYPE["path"].itemsize) == (MAX_NAME_BYTES, MAX_PATH_BYTES)


def test_an_oversized_name_or_path_is_an_error_not_a_cut():
    tables = Layout.create(1, 1, ["m"], ["cpu0"]).tables
    tables.write_slot(0, name="n" * MAX_NAME_BYTES, path="/" + "p" * (MAX_PATH_BYTES - 1))
    assert text(tables.read_slot(0)["name"]) == "n" * MAX_NAME_BYTES
    for field, size in (("name", MAX_NAME_BYTES), ("path", MAX_PATH_BYTES)):
        with pytest.raises(ValueError, match=field):
            tables.write_slot(0, **{field: "x" * (size + 1)})
    assert text(tables.read_slot(0)["name"]) == "n" * MAX_NAME_BYTES  # nothing was written


def test_a_long_reason_is_cut_on_a_character_boundary():
    tables = Layout.create(1, 1, ["m"], ["cpu0"]).tables
    tables.write_slot(0, reason="é" * REASON_BYTES)
    assert text(tables.read_slot(0)["reason"]) == "é" * (REASON_BYTES // 2)
