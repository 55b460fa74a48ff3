"""pantheon-ctl pull of HuggingFace safetensors repos against a local stand-in of the hub: gated on
config.json and the shards' headers (range reads) before any weight byte, then downloaded with
progress and resume, loaded and served."""

import hashlib
import json
import struct

import pytest

from pantheon.ctl import hub
from tests.pantheon.ctl.hubserver import Hub, HubServer
from tests.pantheon.ctl.test_pull import pull
from tests.pantheon.hf.tinyhf import make_hf
from tests.workers.serving import Server

REPO = "test/tiny-qwen3"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def repo_files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A sharded BF16 qwen3 directory, as bytes by file name."""
    path, _, _ = make_hf(tmp_path_factory.mktemp("hf") / "tiny-qwen3", "qwen3", dtype="BF16", shards=2)
    files = repo_files(path)
    assert set(SHARDS) | {"model.safetensors.index.json", "config.json", "tokenizer.json"} <= set(files)
    return files


def header_bytes(data):
    """8 + the JSON header's length: all of a safetensors file that is not weights."""
    return 8 + struct.unpack("<Q", data[:8])[0]


def weight_gets(hub_, name):
    return [h for h in hub_.hits if h.method == "GET" and h.path.endswith("/" + name)]


def test_a_sharded_repo_is_gated_downloaded_with_progress_loaded_and_served(tiny, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    srv = Server(["--models-dir", str(models)])
    try:
        with HubServer(Hub({REPO: dict(tiny, **{"README.md": b"# tiny\n"})})) as server:
            rc, out, err = pull(server.endpoint, REPO, "--models-dir", str(models), "--yes", "--load",
                                "--name", "hfq", url=srv.url)
        assert rc == 0, out + err
        assert "spec from config.json and the headers of 2 safetensors file(s)" in out
        for line in ("[C0]  engine-support  PASS         architecture qwen3; tensor types BF16",
                     "[C2a] disk            PASS", "[B]   kv-calc         FITS", "[C1]  confidence      PASS"):
            assert line in out, out
        assert "confidence high" in out and "loaded" in out
        for shard in SHARDS:
            assert f"{shard}: 100%" in err                               # a progress bar per file
        got = repo_files(models / "tiny-qwen3")
        assert got == {n: d for n, d in tiny.items() if n != "README.md"}  # what serving needs, nothing else
        status, body, _ = srv.request("POST", "/v1/chat/completions",
                                      {"model": "hfq", "max_tokens": 4, "temperature": 0,
                                       "messages": [{"role": "user", "content": "Hello world"}]})
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] >= 1, body
    finally:
        srv.stop()


def test_too_big_is_stopped_before_any_weight_byte_with_the_numbers(tiny, tmp_path):
    served = Hub({REPO: tiny})
    with HubServer(served) as server:
        rc, out, err = pull(server.endpoint, REPO, "--models-dir", str(tmp_path), "--available", "1M", "--yes")
    assert rc == 3 and "[B]   kv-calc         DOES-NOT-FIT" in out
    assert "pull: stopped at [B] kv-calc: DOES-NOT-FIT: RAM: needs" in err and "1.0 MiB available: short by" in err
    assert "only config.json and the safetensors headers" in err
    assert list(tmp_path.iterdir()) == []
    for shard in SHARDS:
        n = header_bytes(tiny[shard])
        assert [h.range for h in weight_gets(served, shard)] == ["bytes=0-7", f"bytes=8-{n - 1}"]
        assert served.served(shard) == n < len(tiny[shard])            # the header, not one weight byte


def test_the_recommend_line_of_a_safetensors_repo(tiny):
    with HubServer(Hub({REPO: tiny})) as server:
        rc, out, _ = pull(server.endpoint, REPO, "--recommend", "--available", "64G")
    assert rc == 0 and out.splitlines()[-1].startswith("RECOMMEND: FITS (RAM: needs")
    assert "confidence high" in out.splitlines()[-1]


def test_an_unsupported_architecture_is_stopped_by_name_before_any_shard_is_read(tiny, tmp_path):
    config = dict(json.loads(tiny["config.json"]), model_type="gemma2")
    served = Hub({"t/gemma": dict(tiny, **{"config.json": json.dumps(config).encode()})})
    with HubServer(served) as server:
        rc, out, err = pull(server.endpoint, "t/gemma", "--models-dir", str(tmp_path / "m"), "--yes")
    assert rc == 3
    assert "[C0]  engine-support  FAIL         UnsupportedArchitecture: config.json model_type 'gemma2' " \
           "is not one of llama, mistral" in out
    assert "stopped at [C0] engine-support" in err and not (tmp_path / "m").exists()
    assert all(served.served(shard) == 0 for shard in SHARDS)


def test_an_unsupported_rope_scaling_is_stopped_naming_the_key(tiny, tmp_path):
    config = dict(json.loads(tiny["config.json"]), rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with HubServer(Hub({REPO: dict(tiny, **{"config.json": json.dumps(config).encode()})})) as server:
        rc, out, _ = pull(server.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
    assert rc == 3 and "rope_scaling type 'yarn' is not supported" in out


def test_an_unsupported_dtype_is_stopped_naming_the_tensor(tiny, tmp_path):
    data = tiny[SHARDS[0]]
    n = header_bytes(data)
    header = json.loads(data[8:n])
    victim = sorted(k for k in header if k != "__metadata__")[0]
    header[victim]["dtype"] = "I16"                     # as many bytes per element as BF16, not a float
    raw = json.dumps(header, separators=(",", ":")).encode().ljust(n - 8)
    assert len(raw) == n - 8
    shard = data[:8] + raw + data[n:]
    with HubServer(Hub({REPO: dict(tiny, **{SHARDS[0]: shard})})) as server:
        rc, out, _ = pull(server.endpoint, REPO, "--models-dir", str(tmp_path / "m"), "--yes")
    assert rc == 3 and f"tensor {victim!r} has dtype 'I16'" in out and "[C0]  engine-support  FAIL" in out


def test_a_repo_without_a_tokenizer_is_refused(tiny, tmp_path):
    files = {n: d for n, d in tiny.items() if n != "tokenizer.json"}
    with HubServer(Hub({REPO: files})) as server:
        rc, out, _ = pull(server.endpoint, REPO, "--recommend")
    assert rc == 3 and "no tokenizer.json" in out


def test_a_partial_download_resumes_file_by_file_and_within_a_file(tiny, tmp_path):
    # huggingface_hub writes 10 MiB chunks: the second shard, padded past its tensors' data to 24 MiB
    # (safetensors readers ignore bytes after the last tensor), cut after 12 MiB leaves a 10 MiB part
    files = dict(tiny, **{SHARDS[1]: tiny[SHARDS[1]] + b"\0" * (24 << 20)})
    served = Hub({REPO: files}, drop_after=12 << 20)
    dest = tmp_path / "tiny-qwen3"
    with HubServer(served) as server:
        rc, out, err = pull(server.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
        assert rc == 4 and "run pull again to resume" in err
        part = dest / (SHARDS[1] + hub.PART_SUFFIX)
        kept = part.stat().st_size
        assert 0 < kept < len(files[SHARDS[1]]) and (dest / SHARDS[0]).read_bytes() == files[SHARDS[0]]
        before = {n: len(weight_gets(served, n)) for n in files}
        served.broken = False
        rc, out, err = pull(server.endpoint, REPO, "--models-dir", str(tmp_path), "--yes")
    assert rc == 0, out + err
    assert f"(1 of {len(files)} files, " in out and "resumed at 10.0 MiB" in out and "sha256 verified" in out
    # downloads ask for a whole file or its rest (no Range, or an open one); derive's reads are closed ranges
    whole_gets = {n: [h for h in weight_gets(served, n)[before[n]:] if h.range == "" or h.range.endswith("-")]
                  for n in files}
    assert [h.range for h in whole_gets[SHARDS[1]]] == [f"bytes={kept}-"]          # resumed within the file
    assert all(not whole_gets[n] for n in files if n != SHARDS[1])                  # complete files kept
    got = hashlib.sha256((dest / SHARDS[1]).read_bytes()).hexdigest()
    assert got == hashlib.sha256(files[SHARDS[1]]).hexdigest() and not part.exists()


def test_cuda_dies_are_judged_on_the_given_vram(tiny):
    with HubServer(Hub({REPO: tiny})) as server:
        rc, out, _ = pull(server.endpoint, REPO, "--dies", "cuda0", "--vram", "1M", "--recommend")
    assert rc == 3 and out.splitlines()[-1].startswith("RECOMMEND: DOES-NOT-FIT (cuda0: needs"), out
