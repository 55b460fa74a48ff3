"""pantheon-ctl pull against a local stand-in of the hub: gate before any download, then download,
resume, checksum, load and serve."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from pantheon.ctl import gate, hub
from pantheon.demo import demo_model_path
from tests.conftest import shared_path
from tests.ggufcraft import rewrite
from tests.pantheon.ctl.hubserver import Hub, HubServer
from tests.workers.serving import ROOT, Server

REPO = "test/demo-GGUF"
FILE = "demo-Q8_0.gguf"


def pull(endpoint, *args, url=None, timeout=300):
    cmd = [sys.executable, str(ROOT / "bin" / "pantheon-ctl"), *(["--url", url] if url else []), "pull", *args]
    env = {**os.environ, "HF_ENDPOINT": endpoint}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def demo_hub():
    data = open(demo_model_path(), "rb").read()
    hub_ = Hub({REPO: {FILE: data, "README.md": b"# demo\n"}})
    with HubServer(hub_) as server:
        server.hub, server.data = hub_, data
        yield server


def test_parse_source_forms():
    assert hub.parse_source("Qwen/Qwen3-8B-GGUF", exists=lambda p: False) == hub.Source(
        "hub", "Qwen/Qwen3-8B-GGUF", repo="Qwen/Qwen3-8B-GGUF", revision="main")
    s = hub.parse_source("o/n@v2:m-Q8_0.gguf", exists=lambda p: False)
    assert (s.repo, s.revision, s.file) == ("o/n", "v2", "m-Q8_0.gguf")
    assert hub.parse_source("o/n:q4_k_m", exists=lambda p: False).tag == "q4_k_m"
    s = hub.parse_source("https://huggingface.co/o/n/resolve/abc/x.gguf")
    assert (s.kind, s.repo, s.revision, s.file) == ("hub", "o/n", "abc", "x.gguf")
    assert hub.parse_source("https://example.com/x.gguf").kind == "url"
    assert hub.parse_source("./x.gguf").kind == "local"


def test_a_fitting_gguf_is_gated_downloaded_with_progress_loaded_and_served(demo_hub, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    srv = Server(["--models-dir", str(models)])
    try:
        rc, out, err = pull(demo_hub.endpoint, REPO, "--models-dir", str(models), "--yes", "--load",
                            "--name", "pulled", url=srv.url)
        assert rc == 0, out + err
        for gate_line in ("[C0]  engine-support  PASS", "[C2a] disk            PASS", "[B]   kv-calc         FITS",
                          "[C1]  confidence      PASS"):
            assert gate_line in out
        assert "sha256 verified" in out and "loaded" in out
        assert f"{FILE}: 100%" in err                        # the progress bar
        assert (models / FILE).read_bytes() == demo_hub.data
        status, body, _ = srv.request("POST", "/v1/completions",
                                      {"model": "pulled", "prompt": "The meaning of", "max_tokens": 5})
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] >= 1
    finally:
        srv.stop()


def test_too_big_is_stopped_before_the_download_with_the_numbers(demo_hub, tmp_path):
    rc, out, err = pull(demo_hub.endpoint, REPO, "--models-dir", str(tmp_path), "--available", "64M", "--yes")
    assert rc == 3
    assert "[B]   kv-calc         DOES-NOT-FIT" in out
    assert "pull: stopped at [B] kv-calc: DOES-NOT-FIT: RAM: needs" in err and "64.0 MiB available: short by" in err
    assert os.listdir(tmp_path) == []
    gets = [h for h in demo_hub.hub.hits if h.method == "GET" and h.path.endswith(FILE)]
    assert gets and all(h.range.startswith("bytes=0-") for h in gets)       # header reads only
    assert demo_hub.hub.served(FILE) <= hub.FIRST_READ < len(demo_hub.data)


def test_cuda_dies_are_judged_on_the_given_vram(demo_hub, tmp_path):
    rc, out, err = pull(demo_hub.endpoint, REPO, "--dies", "cuda0", "--vram", "1M", "--recommend")
    assert rc == 3 and out.splitlines()[-1].startswith("RECOMMEND: DOES-NOT-FIT (cuda0: needs")


def test_recommend_prints_the_one_line_verdict_and_downloads_nothing(demo_hub, tmp_path):
    rc, out, _ = pull(demo_hub.endpoint, REPO, "--recommend", "--models-dir", str(tmp_path))
    assert rc == 0
    last = out.splitlines()[-1]
    assert last.startswith("RECOMMEND: FITS (RAM: needs") and "confidence high" in last and "static check" in last
    assert os.listdir(tmp_path) == [] and demo_hub.hub.served(FILE) <= hub.FIRST_READ


def test_an_unsupported_architecture_is_stopped_by_name(tmp_path):
    src = tmp_path / "gemma.gguf"
    rewrite(shared_path("golden", "llama-f32.gguf"), src, set_keys={"general.architecture": ("gemma2", None)})
    data = src.read_bytes()
    with HubServer(Hub({"t/gemma": {"g-F32.gguf": data}})) as server:
        rc, out, err = pull(server.endpoint, "t/gemma:g-F32.gguf", "--models-dir", str(tmp_path / "m"), "--yes")
    assert rc == 3
    assert "[C0]  engine-support  FAIL" in out and "architecture 'gemma2' is not one of" in out
    assert "stopped at [C0] engine-support" in err and not (tmp_path / "m").exists()


def test_a_repo_of_pytorch_bin_weights_is_refused_by_the_engine_gate_with_its_kv_math(tmp_path):
    config = {"model_type": "qwen3", "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
              "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072, "vocab_size": 151936,
              "max_position_embeddings": 40960}
    repo = {"config.json": json.dumps(config).encode(), "pytorch_model.bin": b"\0" * 4096}
    with HubServer(Hub({"t/st": repo})) as server:
        rc, out, err = pull(server.endpoint, "t/st", "--recommend")
    assert rc == 3
    assert "no GGUF file and no model.safetensors or model.safetensors.index.json in t/st@main" in out
    assert "spec from config.json" in out and "KV 112.0 KiB/token" in out  # 2 x 28 x 8 x 128 x 2 bytes


def test_the_disk_gate_names_the_numbers(demo_hub, tmp_path):
    demo_hub.hub.listed_size[FILE] = 1 << 60          # what the metadata API claims
    rc, out, err = pull(demo_hub.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
    assert rc == 3 and "[C2a] disk            FAIL         needs 1024.0 PiB" in out and "short by" in out
    assert "stopped at [C2a] disk" in err and os.listdir(tmp_path) == []


def test_a_partial_download_resumes_and_is_checksummed(tmp_path):
    # huggingface_hub writes 10 MiB chunks: a file of 24 MiB (the demo GGUF, then padding no tensor
    # reaches) cut after 12 MiB leaves a 10 MiB part file
    data = open(demo_model_path(), "rb").read() + b"\0" * (20 << 20)
    served = Hub({REPO: {FILE: data}}, drop_after=12 << 20)   # hangs up after 12 MiB, then answers 500
    with HubServer(served) as server:
        rc, out, err = pull(server.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
        assert rc == 4 and "run pull again to resume" in err
        part = tmp_path / (FILE + hub.PART_SUFFIX)
        kept = part.stat().st_size
        assert 0 < kept < len(data) and not (tmp_path / FILE).exists()
        served.broken = False
        rc, out, err = pull(server.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
    assert rc == 0, out + err
    assert f"resumed at {kept / (1 << 20):.1f} MiB" in out and "sha256 verified" in out
    last = [h for h in served.hits if h.method == "GET" and h.path.endswith(FILE)][-1]
    assert last.range == f"bytes={kept}-" and last.sent == len(data) - kept
    assert hashlib.sha256((tmp_path / FILE).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert not part.exists()


def test_a_corrupt_download_fails_the_checksum(demo_hub, tmp_path):
    part = tmp_path / (FILE + hub.PART_SUFFIX)
    part.write_bytes(b"\xff" * 1000)                   # a stale part that does not match the file
    rc, out, err = pull(demo_hub.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
    assert rc == 4 and "checksum mismatch" in err and not (tmp_path / FILE).exists() and not part.exists()


def test_catalog_math_when_the_header_cannot_be_read(tmp_path):
    spec = gate.Spec(hub.Source("hub", "Qwen/Qwen3-8B-GGUF", repo="Qwen/Qwen3-8B-GGUF"), "Qwen3-8B-Q4_K_M.gguf",
                     5 << 30, "http://x/y")
    gate._spec_from_config(spec, None, None)
    result = gate.run_gates(spec, ("cpu0",), 8192, 1, None, (64 << 30, None), {})
    assert result.confidence == gate.MEDIUM and result.action == gate.ACCEPT
    assert result.estimate.kv_per_token == 2 * 36 * 8 * 128 * 2           # Qwen3-8B from the catalog
    assert [g[2] for g in result.gates] == ["UNCONFIRMED", "SKIP", "FITS", "ACCEPT?"]
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_force_downloads_what_a_gate_stopped_and_says_so(demo_hub, tmp_path):
    rc, out, err = pull(demo_hub.endpoint, REPO, "--models-dir", str(tmp_path), "--available", "64M", "--force")
    assert rc == 0, out + err
    assert "pull: stopped at [B] kv-calc: DOES-NOT-FIT" in err and "overridden by --force" in err
    assert (tmp_path / FILE).read_bytes() == demo_hub.data


def test_a_plain_url_is_sized_by_head_and_gated_on_its_header(demo_hub, tmp_path):
    url = f"{demo_hub.endpoint}/{REPO}/resolve/main/{FILE}"
    rc, out, _ = pull("http://127.0.0.1:9", url, "--recommend")      # another hub: the URL is just a URL
    assert rc == 0 and "spec from the GGUF header" in out and out.splitlines()[-1].startswith("RECOMMEND: FITS")
    assert [h.method for h in demo_hub.hub.hits][:1] == ["HEAD"] and demo_hub.hub.served(FILE) <= hub.FIRST_READ


def test_a_local_gguf_is_gated_and_copied_into_the_models_dir(tmp_path):
    rc, out, err = pull("http://127.0.0.1:9", str(demo_model_path()), "--models-dir", str(tmp_path / "m"))
    assert rc == 0, out + err
    assert "[C0]  engine-support  PASS" in out and "copied into" in out
    assert (tmp_path / "m" / demo_model_path().name).read_bytes() == demo_model_path().read_bytes()
