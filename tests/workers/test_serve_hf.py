"""pantheon-serve with HuggingFace models: a directory, a .safetensors file with --config, an admin load."""

import json
import shutil

import pytest
import tokenizers

from tests.pantheon.hf.tinyhf import make_hf
from tests.workers.serving import Server

TOKEN = "admin-secret-hf"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    make_hf(root / "qwen3-tiny", "qwen3", dtype="BF16", shards=2)
    src, _, _ = make_hf(root / "mistral-src", "mistral", dtype="F16")
    meta = root / "mistral-meta"
    meta.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.move(str(src / name), str(meta / name))
    make_hf(root / "phi3-tiny", "phi3")
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy(meta / "config.json", outside / "config.json")
    return root, outside


@pytest.fixture(scope="module")
def server(models):
    root, _ = models
    srv = Server(["--models-dir", str(root), "--admin-token", TOKEN, "--quantize",
                  "--model", str(root / "qwen3-tiny"), "--name", "q3",
                  "--model", str(root / "mistral-src" / "model.safetensors"),
                  "--config", str(root / "mistral-meta" / "config.json"), "--name", "mis"])
    yield srv
    assert srv.stop() == 0


def _post(server, path, body, headers=None):
    status, raw, _ = server.request("POST", path, body, headers=headers, timeout=120)
    return status, json.loads(raw)


def test_chat_tokenizes_with_tokenizer_json(server, models):
    root, _ = models
    status, body = _post(server, "/v1/chat/completions", {"model": "q3", "max_tokens": 4, "temperature": 0,
                                                          "messages": [{"role": "user", "content": "Hello été"}]})
    assert status == 200, body
    prompt = "<|im_start|>user\nHello été<|im_end|>\n<|im_start|>assistant\n"
    want = tokenizers.Tokenizer.from_file(str(root / "qwen3-tiny" / "tokenizer.json")).encode(prompt).ids
    assert body["usage"]["prompt_tokens"] == len(want)
    assert body["usage"]["completion_tokens"] >= 1


def test_safetensors_file_with_config(server):
    status, body = _post(server, "/v1/completions", {"model": "mis", "prompt": "Hello world", "max_tokens": 3,
                                                     "temperature": 0})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == 1 + 2  # <s> ▁Hello ▁world


def test_admin_loads_a_directory(server, models):
    status, body = _post(server, "/admin/models/load", {"path": "phi3-tiny", "name": "phi"}, ADMIN)
    assert status == 200 and body["model"]["state"] == "loaded", body
    status, out = _post(server, "/v1/completions", {"model": "phi", "prompt": "the fox", "max_tokens": 2})
    assert status == 200, out
    assert _post(server, "/admin/models/unload", {"name": "phi"}, ADMIN)[0] == 200


def test_admin_config_is_confined(server, models):
    _, outside = models
    status, body = _post(server, "/admin/models/load", {"path": "mistral-src/model.safetensors", "name": "x",
                                                        "config": str(outside / "config.json")}, ADMIN)
    assert status == 400 and body["error"]["code"] == "path_outside_models_dir", body
    status, body = _post(server, "/admin/models/load", {"path": "mistral-src/model.safetensors", "name": "x"}, ADMIN)
    assert status == 400 and "config.json" in body["error"]["message"], body
