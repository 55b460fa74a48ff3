"""A HuggingFace safetensors repo read before any weight byte: config.json, the shard index, and each
shard's 8-byte header length and JSON header by HTTP range reads; then the files a served directory needs."""

import re
from dataclasses import dataclass

from pantheon.ctl import hub
from pantheon.errors import MissingTensor, TruncatedFile
from pantheon.hf.config import config_from_hf, tied_embeddings
from pantheon.hf.directory import INDEX, MAX_SHARDS, SINGLE, HFLayoutError, plain_shard_name
from pantheon.hf.names import rename
from pantheon.hf.tensors import header_length, header_records

# What pantheon-serve reads from an HF directory besides the weights (pantheon.hf.directory,
# pantheon.text.hf_text); the first two it cannot do without.
TEXT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
              "chat_template.jinja")
REQUIRED = TEXT_FILES[:2]
_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")


@dataclass(frozen=True)
class RemoteModel:
    """What the repo's own files say: the engine config, its tensors under GGUF names (no data),
    the shards, and the bytes read to learn it."""

    config: object          # pantheon.gguf.config.ModelConfig
    tensors: dict           # GGUF name -> pantheon.hf.tensors.TensorRecord
    shards: tuple
    header_read: int


def is_safetensors_repo(listing):
    return INDEX in listing.files or SINGLE in listing.files


def downloads(listing, shards=None):
    """The RemoteFiles a served directory needs: its text files, the index, and `shards` (when the
    index was not read: model.safetensors, or the model-NNNNN-of-NNNNN shards the listing has)."""
    names = [n for n in TEXT_FILES if n in listing.files] + ([INDEX] if INDEX in listing.files else [])
    if shards is None:
        shards = [SINGLE] if SINGLE in listing.files else sorted(n for n in listing.files if _SHARD.fullmatch(n))
    return tuple(listing.files[n] for n in names + list(shards))


def read_repo(listing, name, headers=None):
    """RemoteModel of the repo in `listing`. The config is judged before any shard is touched, so an
    architecture Pantheon does not run costs one small read; typed GGUFError subclasses say why."""
    missing = [n for n in REQUIRED if n not in listing.files]
    if missing:
        raise HFLayoutError(f"{listing.repo}: no {' or '.join(missing)} (pantheon-serve needs config.json and "
                            f"tokenizer.json beside the weights)")
    hf_config = hub.read_json(listing.files["config.json"].url, headers)
    cfg = config_from_hf(hf_config, name=name)
    weight_map, shards = _shards(listing, headers)
    tensors, read = {}, 0
    for shard in shards:
        records, n = _shard_header(listing.files[shard], headers)
        tensors.update({k: v for k, v in records.items() if weight_map is None or weight_map.get(k) == shard})
        read += n
    _check_complete(weight_map, tensors)
    named = rename(tensors, tied_embeddings(hf_config))
    if "output.weight" not in named and not tied_embeddings(hf_config):
        raise MissingTensor(f"{listing.repo}: lm_head.weight is absent and tie_word_embeddings is false")
    return RemoteModel(cfg, named, shards, read)


def _shards(listing, headers):
    """(weight_map or None, shard names): from model.safetensors.index.json, else model.safetensors."""
    if INDEX not in listing.files:
        return None, (SINGLE,)
    index = hub.read_json(listing.files[INDEX].url, headers)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFLayoutError(f"{INDEX}: 'weight_map' is not a non-empty object")
    shards = sorted(set(weight_map.values()), key=str)
    if len(shards) > MAX_SHARDS or not all(plain_shard_name(s) for s in shards):
        raise HFLayoutError(f"{INDEX}: shard names must be plain .safetensors file names (at most {MAX_SHARDS})")
    absent = [s for s in shards if s not in listing.files]
    if absent:
        raise HFLayoutError(f"{INDEX} names {absent[0]!r}, which is not in {listing.repo}@{listing.revision}")
    return weight_map, tuple(shards)


def _shard_header(f, headers):
    """({name: TensorRecord}, bytes read) of one shard: its first 8 bytes, then exactly its header."""
    if f.size is None:
        raise HFLayoutError(f"{f.name}: the hub lists no size, so its header cannot be checked")
    n = header_length(f.name, hub.read_bytes(f.url, 8, headers), f.size)
    raw = hub.read_bytes(f.url, n, headers, offset=8)
    if len(raw) < n:
        raise TruncatedFile(f"{f.name}: {len(raw)} header bytes came back of {n}")
    return header_records(f.name, raw, f.size), 8 + n


def _check_complete(weight_map, tensors):
    missing = sorted(set(weight_map or ()) - set(tensors))
    if missing:
        raise MissingTensor(f"{INDEX}: {missing[0]!r} is not in shard {weight_map[missing[0]]!r}"
                            + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""))
