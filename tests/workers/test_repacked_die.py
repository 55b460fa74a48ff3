"""A CPU die serves Q4_0 / Q8_0 models from their repacked sidecar (PANTHEON_REPACK_DIR), or not when off."""

import json

import pytest

from pantheon.engine.kernels import q8dot
from tests.workers.serving import Server

pytestmark = pytest.mark.skipif(not q8dot.has_vnni(), reason="the repacked kernels need AVX512-VNNI")

BODY = {"prompt": "The repacked die says", "max_tokens": 6, "temperature": 0}


def serve(directory):
    """(sidecars written, the completion's text, the server's log) for one server on the demo model."""
    srv = Server(["--http-workers", "1", "--cpu-dies", "1"], env={"PANTHEON_REPACK_DIR": str(directory)})
    try:
        status, body, _ = srv.request("POST", "/v1/completions", BODY)
        assert status == 200, body
        text = json.loads(body)["choices"][0]["text"]
    finally:
        assert srv.stop() == 0
    return sorted(directory.glob("*.repack")) if directory.is_dir() else [], text, srv.log()


def test_the_die_writes_the_sidecar_once_and_serves_the_same_tokens(tmp_path):
    files, first, log = serve(tmp_path / "rp")
    assert len(files) == 1 and "repacking 29 matrices" in log, log[-2000:]
    files_again, second, log = serve(tmp_path / "rp")
    assert files_again == files and "repacking" not in log  # mapped, not rewritten
    assert first == second


def test_off_writes_nothing_and_serves_the_same_tokens(tmp_path):
    srv = Server(["--http-workers", "1", "--cpu-dies", "1"], env={"PANTHEON_REPACK_DIR": "off"})
    try:
        status, body, _ = srv.request("POST", "/v1/completions", BODY)
        assert status == 200, body
        off_text = json.loads(body)["choices"][0]["text"]
    finally:
        assert srv.stop() == 0
    _, repacked_text, _ = serve(tmp_path / "rp")
    assert off_text == repacked_text
