"""A CPU die serves a model from its repacked sidecar (PANTHEON_REPACK_DIR), or from its file when off."""

import json

import pytest

from pantheon.engine.kernels.vnni import has_int8_dots
from tests.workers.serving import Server

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="the repacked kernels need AVX512-VNNI or AVX2")

BODY = {"prompt": "The repacked die says", "max_tokens": 6, "temperature": 0}


def serve(setting, directory=None):
    """(sidecars in `directory`, the completion's text, the server's log) for one server on the demo model
    with PANTHEON_REPACK_DIR=`setting`."""
    srv = Server(["--http-workers", "1", "--cpu-dies", "1"], env={"PANTHEON_REPACK_DIR": str(setting)})
    try:
        status, body, _ = srv.request("POST", "/v1/completions", BODY)
        assert status == 200, body
        text = json.loads(body)["choices"][0]["text"]
    finally:
        assert srv.stop() == 0
    return sorted(directory.glob("*.repack")) if directory and directory.is_dir() else [], text, srv.log()


def test_the_die_writes_the_sidecar_once_and_serves_the_same_tokens(tmp_path):
    files, first, log = serve(tmp_path / "rp", tmp_path / "rp")
    assert len(files) == 1 and "repacking 29 matrices" in log, log[-2000:]
    files_again, second, log = serve(tmp_path / "rp", tmp_path / "rp")
    assert files_again == files and "repacking" not in log  # mapped, not rewritten
    assert first == second


def test_off_writes_nothing_and_serves_the_same_tokens(tmp_path):
    _, off_text, log = serve("off")
    assert "repacking" not in log
    _, repacked_text, _ = serve(tmp_path / "rp", tmp_path / "rp")
    assert off_text == repacked_text
