"""A HuggingFace model: config.json, (sharded) safetensors weights and tokenizer files, located and opened."""

import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from pantheon.errors import GGUFError, MissingTensor
from pantheon.hf.config import config_from_hf, read_json, tied_embeddings
from pantheon.hf.names import rename
from pantheon.hf.tensors import open_safetensors

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_INDEX_BYTES = 64 << 20
MAX_SHARDS = 4096


class HFLayoutError(GGUFError):
    """The files of an HF model are missing, misplaced or contradict each other."""


@dataclass(frozen=True, eq=False)
class HFModel:
    """Where an HF model's parts lie; `tensors` ({GGUF name: TensorInfo}) is empty unless asked for."""

    path: str
    config_path: str
    text_dir: str  # tokenizer.json, tokenizer_config.json, generation_config.json live here
    hf_config: Mapping
    metadata: Mapping  # GGUF-style general.* keys, so callers that print metadata need no branch
    tensors: Mapping

    @property
    def config(self):
        """The engine's ModelConfig."""
        return config_from_hf(self.hf_config, name=self.metadata["general.name"])


def is_hf(path, config=None):
    """True for a directory, a .safetensors or index file, or whenever a config.json is given."""
    path = os.fspath(path)
    return bool(config) or os.path.isdir(path) or path.endswith((".safetensors", ".safetensors.index.json"))


def open_hf(path, config=None, tensors=True):
    """Open an HF model at `path` (a directory, a .safetensors file or an index) with `config`
    (default: config.json beside the weights). Typed errors name the file at fault."""
    path = os.fspath(path)
    config_path = os.fspath(config) if config else os.path.join(_weights_dir(path), "config.json")
    if not os.path.isfile(config_path):
        raise HFLayoutError(f"{path}: no config.json at {config_path}; give --config PATH")
    hf_config = MappingProxyType(read_json(config_path, "config.json"))
    name = os.path.basename(os.path.normpath(path)) if os.path.isdir(path) else os.path.basename(path)
    meta = MappingProxyType({"general.architecture": str(hf_config.get("model_type")), "general.name": name})
    model = HFModel(path, config_path, os.path.dirname(os.path.abspath(config_path)), hf_config, meta, {})
    config_from_hf(hf_config)  # refuses an unsupported config before any weight file is read
    if not tensors:
        return model
    named = rename(_open_weights(path), tied_embeddings(hf_config))
    if "output.weight" not in named and not tied_embeddings(hf_config):
        raise MissingTensor(f"{path}: lm_head.weight is absent and tie_word_embeddings is false")
    return HFModel(path, config_path, model.text_dir, hf_config, meta, MappingProxyType(named))


def _weights_dir(path):
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def _open_weights(path):
    """{HF name: TensorInfo} over every shard."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, INDEX)):
            return _open_index(os.path.join(path, INDEX))
        if os.path.isfile(os.path.join(path, SINGLE)):
            return open_safetensors(os.path.join(path, SINGLE))
        raise HFLayoutError(f"{path}: neither {INDEX} nor {SINGLE} is in the directory")
    if path.endswith(".index.json"):
        return _open_index(path)
    return open_safetensors(path)


def _open_index(index_path):
    index = read_json(index_path, INDEX, limit=MAX_INDEX_BYTES)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFLayoutError(f"{index_path}: 'weight_map' is not a non-empty object")
    shards = set(weight_map.values())
    if len(shards) > MAX_SHARDS or not all(plain_shard_name(s) for s in shards):
        raise HFLayoutError(f"{index_path}: shard names must be plain .safetensors file names in the "
                            f"same directory (at most {MAX_SHARDS})")
    where, tensors = os.path.dirname(os.path.abspath(index_path)), {}
    for shard in sorted(shards):
        opened = open_safetensors(os.path.join(where, shard))
        for name, info in opened.items():
            if weight_map.get(name) == shard:
                tensors[name] = info
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise MissingTensor(f"{index_path}: {missing[0]!r} is not in shard {weight_map[missing[0]]!r}"
                            + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""))
    return tensors


def plain_shard_name(shard):
    return (isinstance(shard, str) and shard.endswith(".safetensors") and os.path.basename(shard) == shard
            and shard not in (".", "..") and "\0" not in shard)
