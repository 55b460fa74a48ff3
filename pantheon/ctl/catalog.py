"""The model catalog (pantheon/ctl/catalog/*.toml): families with their KV math, and measured bench rows."""

import datetime
import math
import pathlib
import re
import tomllib
from dataclasses import dataclass

from pantheon.errors import UsageError
from pantheon.gguf.config import NEOX_ROPE, ModelConfig

CATALOG_DIR = pathlib.Path(__file__).with_name("catalog")
_MODEL_KEYS = ("name", "match", "layers", "heads", "kv_heads", "head_dim", "dim", "ff", "vocab", "ctx_train",
               "sliding_window")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Family:
    """One catalog file: a GGUF architecture, the config.json model_types it covers, its models."""

    name: str
    arch: str
    model_types: tuple
    models: tuple    # dicts with _MODEL_KEYS (+ experts, experts_used, expert_ff for MoE)
    measured: tuple  # rows `bench --record` appended
    path: pathlib.Path


def load(directory=CATALOG_DIR):
    """Every family in `directory`, by name; UsageError naming the file and key for a malformed one."""
    families = {}
    for path in sorted(pathlib.Path(directory).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise UsageError(f"catalog {path}: {e}") from None
        families[data.get("family", path.stem)] = _family(data, path)
    return families


def _family(data, path):
    models = tuple(data.get("model", ()))
    for i, model in enumerate(models):
        missing = [k for k in _MODEL_KEYS if k not in model]
        if missing:
            raise UsageError(f"catalog {path}: model #{i} lacks {', '.join(missing)}")
    return Family(name=data.get("family", path.stem), arch=data["arch"], model_types=tuple(data.get("model_types", ())),
                  models=models, measured=tuple(data.get("measured", ())), path=path)


def find(families, names=(), model_type=None):
    """(family, model row) for the first model whose `match` substring is in one of `names` (repo id,
    file name; case-insensitive); (family, None) when only the config.json model_type is known."""
    lowered = [n.lower() for n in names if n]
    for family in families.values():
        for model in family.models:
            if any(m in n for m in model["match"] for n in lowered):
                return family, model
    for family in families.values():
        if model_type and model_type in family.model_types:
            return family, None
    return None, None


def config_for(arch, row) -> ModelConfig:
    """The ModelConfig a catalog row (or a config.json mapped onto the same keys) describes."""
    return ModelConfig(arch=arch, name=row["name"], n_vocab=row["vocab"], n_ctx_train=row["ctx_train"], dim=row["dim"],
                       n_layer=row["layers"], n_head=row["heads"], n_head_kv=row["kv_heads"], head_dim=row["head_dim"],
                       n_ff=row["ff"], norm_eps=1e-6, rope_base=10000.0, n_rot=row["head_dim"],
                       neox_rope=arch in NEOX_ROPE, n_expert=row.get("experts", 0),
                       n_expert_used=row.get("experts_used", 0), n_ff_expert=row.get("expert_ff", 0))


def row_from_config_json(config, name):
    """A catalog-shaped row from a HuggingFace config.json, or None when a KV key is missing."""
    try:
        heads = int(config["num_attention_heads"])
        row = {"name": name, "match": [], "layers": int(config["num_hidden_layers"]), "heads": heads,
               "kv_heads": int(config.get("num_key_value_heads", heads)), "dim": int(config["hidden_size"]),
               "ff": int(config.get("intermediate_size", 0)) or 1, "vocab": int(config["vocab_size"]),
               "ctx_train": int(config.get("max_position_embeddings", 4096))}
        row["head_dim"] = int(config.get("head_dim") or row["dim"] // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    row["sliding_window"] = int(window) if isinstance(window, int) else 0
    if config.get("num_experts"):
        row.update(experts=int(config["num_experts"]), experts_used=int(config.get("num_experts_per_tok", 1)),
                   expert_ff=int(config.get("moe_intermediate_size", 0)))
    return row


def kv_bytes_per_token(row, element_bytes):
    """Keys and values of one position over every layer (what pantheon.serve.fit counts)."""
    return 2 * row["layers"] * row["kv_heads"] * row["head_dim"] * element_bytes


def append_measured(family, row, now=None):
    """Append one `[[measured]]` table to the family's catalog file; returns its text."""
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = ["", "[[measured]]", f"date = {_toml_value(stamp)}"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in row.items()]
    text = "\n".join(lines) + "\n"
    with open(family.path, "a", encoding="utf-8") as f:
        f.write(text)
    return text


def _toml_key(key):
    return key if _BARE_KEY.fullmatch(key) else _toml_value(str(key))


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    escaped = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
