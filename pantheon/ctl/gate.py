"""`pull`'s derive and gate: the model's spec from its repo's own files, then [C0] engine support,
[C2a] disk, [B] the kv-calc fit verdict and [C1] confidence x verdict -> the terminal action."""

import os
import shutil
from dataclasses import dataclass, field
from typing import Optional

from pantheon.ctl import catalog, hf_remote, hub
from pantheon.ctl.output import human_bytes
from pantheon.errors import GGUFError, UsageError
from pantheon.gguf.config import ARCHITECTURES, config_from_metadata
from pantheon.serve import fit

HIGH, MEDIUM, LOW = "high", "medium", "low"
PASS, ACCEPT, STOP = "download", "accept", "stop"   # C1's terminal actions
# config.json model_type -> GGUF architecture, for the families Pantheon runs
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3moe",
               "phi3": "phi3"}
CAVEAT = ("boot-fit is a static check, necessary not sufficient: long agent contexts can still fail at run time; "
          "run `pantheon-ctl verify --stress` once it is loaded")


@dataclass
class Spec:
    """What derive learnt before any weight byte: the file, where it comes from, and its model."""

    source: hub.Source
    name: str                          # the file name it will have in --models-dir
    size: Optional[int]
    location: str                      # URL or local path
    sha256: Optional[str] = None
    layout: object = None              # pantheon.gguf.file.GGUFLayout when the header was read whole
    header_read: int = 0
    row: Optional[dict] = None         # KV math from config.json or the catalog when the header is not read
    arch: Optional[str] = None
    derived_from: str = "nothing"
    refusal: Optional[str] = None      # why [C0] fails, decided while deriving
    files: tuple = ()
    config: object = None              # ModelConfig, once the GGUF header or config.json was read
    tensors: Optional[dict] = None     # GGUF name -> record (qtype, shape, n_bytes) when every header was read
    downloads: tuple = ()              # an HF repo's RemoteFiles, fetched into --models-dir/NAME/

    def targets(self, models_dir):
        """(where the model will be, [(RemoteFile, local path)]) under `models_dir`."""
        if self.downloads:
            root = os.path.join(models_dir, self.name)
            return root, [(f, os.path.join(root, f.name)) for f in self.downloads]
        dest = os.path.join(models_dir, self.name)
        return dest, [(hub.RemoteFile(self.name, self.size, self.sha256, self.location), dest)]


@dataclass
class GateResult:
    spec: Spec
    gates: list = field(default_factory=list)   # (code, name, status, detail)
    verdict: Optional[fit.Verdict] = None
    estimate: Optional[fit.Estimate] = None
    confidence: str = LOW
    action: str = STOP
    stopped_at: Optional[str] = None            # "[C0] engine-support" ...
    dest: Optional[str] = None
    already: bool = False                       # dest exists, complete

    def add(self, code, name, status, detail):
        self.gates.append((code, name, status, detail))
        if status in ("FAIL", "DOES-NOT-FIT", "REFUSED") and self.stopped_at is None:
            self.stopped_at = f"{code} {name}"


# ---- derive


def derive(source, endpoint, headers=None):
    """Spec of `source` from the hub's metadata API (file list, sizes, sha256), config.json and the
    GGUF header read by range requests, or from the local file's first bytes."""
    if source.kind == "local":
        return _derive_local(source)
    if source.kind == "url":
        size = hub.remote_size(source.url, headers)
        spec = Spec(source, os.path.basename(source.file or "model.gguf"), size, source.url)
        return _read_header(spec, hub.url_reader(source.url, headers))
    listing = hub.list_repo(source, endpoint)
    name = hub.choose_gguf(listing, source)
    if name is None:
        return _no_gguf(source, listing, headers)
    f = listing.files[name]
    spec = Spec(source, os.path.basename(name), f.size, f.url, f.sha256, files=tuple(listing.files))
    if hub.is_split(name):
        spec.refusal = f"{name} is one part of a split GGUF; Pantheon opens single-file GGUFs only"
        return spec
    return _read_header(spec, hub.url_reader(f.url, headers), listing, headers)


def _derive_local(source):
    if not os.path.isfile(source.path):
        raise UsageError(f"SOURCE {source.text!r}: no such file")
    spec = Spec(source, os.path.basename(source.path), os.path.getsize(source.path), os.path.abspath(source.path))
    return _read_header(spec, hub.file_reader(source.path))


def _no_gguf(source, listing, headers):
    files = sorted(listing.files)
    spec = Spec(source, source.repo.split("/")[-1], None, source.text, files=tuple(files))
    ggufs = [n for n in files if n.lower().endswith(".gguf")]
    if source.tag and ggufs:
        raise UsageError(f"{source.repo}: no GGUF matches {source.tag!r} (GGUF files: {', '.join(ggufs)})")
    if ggufs:
        raise UsageError(f"{source.repo}: several GGUF files and none preferred; name one as "
                         f"{source.repo}:FILE (choices: {', '.join(ggufs)})")
    if hf_remote.is_safetensors_repo(listing):
        return _derive_hf(spec, listing, headers)
    weights = [n for n in files if n.endswith((".safetensors", ".bin", ".pt", ".pth"))]
    spec.size = sum(listing.files[n].size or 0 for n in weights) or None
    spec.refusal = (f"no GGUF file and no model.safetensors or {hf_remote.INDEX} in {source.repo}@"
                    f"{listing.revision} ({len(weights)} other weight files); pull fetches a GGUF file or an "
                    f"HF safetensors directory")
    _spec_from_config(spec, listing, headers)
    return spec


def _derive_hf(spec, listing, headers):
    """An HF safetensors repo: config.json judged first, then every shard's header by range reads."""
    spec.downloads = hf_remote.downloads(listing)
    spec.size = sum(f.size or 0 for f in spec.downloads)
    try:
        remote = hf_remote.read_repo(listing, spec.name, headers)
    except GGUFError as e:
        spec.refusal = f"{type(e).__name__}: {e}"
        spec.derived_from = "the repo's config.json and safetensors headers (refused)"
        return spec
    spec.downloads = hf_remote.downloads(listing, remote.shards)
    spec.size = sum(f.size or 0 for f in spec.downloads)
    spec.config, spec.tensors, spec.arch, spec.header_read = remote.config, remote.tensors, remote.config.arch, \
        remote.header_read
    spec.derived_from = (f"config.json and the headers of {len(remote.shards)} safetensors file(s) "
                         f"({human_bytes(remote.header_read)} read of {human_bytes(spec.size)})")
    return spec


def _read_header(spec, read, listing=None, headers=None):
    if spec.size is None:
        spec.refusal = spec.refusal or f"{spec.location}: the size is unknown (no Content-Length), cannot gate it"
        return spec
    try:
        spec.layout, spec.header_read = hub.read_gguf_header(read, spec.size, spec.location)
    except GGUFError as e:
        spec.refusal = f"{type(e).__name__}: {e}"
        return spec
    if spec.layout is not None:
        spec.derived_from = f"the GGUF header ({human_bytes(spec.header_read)} read of {human_bytes(spec.size)})"
        spec.arch = spec.layout.metadata.get("general.architecture")
        try:
            spec.config, spec.tensors = config_from_metadata(spec.layout.metadata), spec.layout.tensors
        except GGUFError as e:
            spec.refusal = f"{type(e).__name__}: {e}"
        return spec
    _spec_from_config(spec, listing, headers)
    return spec


def _spec_from_config(spec, listing, headers):
    """KV math without the header: config.json when the repo has one, else a catalog row."""
    config, names = None, [spec.source.repo or "", spec.name]
    if listing is not None and "config.json" in listing.files:
        config = hub.read_json(listing.files["config.json"].url, headers)
        row = catalog.row_from_config_json(config, spec.name)
        arch = MODEL_TYPES.get(config.get("model_type"))
        if row is not None and arch:
            spec.row, spec.arch, spec.derived_from = row, arch, "config.json (no GGUF header read)"
            return
    family, row = catalog.find(catalog.load(), names, (config or {}).get("model_type"))
    if row is not None:
        spec.row, spec.arch = row, family.arch
        spec.derived_from = f"the catalog's {row['name']} ({family.path.name}; no GGUF header read)"
    elif family is not None:
        spec.arch, spec.derived_from = family.arch, f"the catalog family {family.name} (no KV math for this model)"


# ---- gate


def run_gates(spec, dies, ctx, slots, models_dir, mem, vram):
    """Every gate in order; `mem` is (available, total or None) host bytes; `vram` die -> free bytes."""
    result = GateResult(spec)
    _engine_gate(result)
    _disk_gate(result, models_dir)
    _fit_gate(result, dies, ctx, slots, mem, vram)
    _confidence_gate(result)
    return result


def _engine_gate(result):
    spec = result.spec
    if spec.refusal is None and spec.tensors is not None:
        try:
            fit._check_tensors(spec.tensors, spec.config)
        except GGUFError as e:
            spec.refusal = f"{type(e).__name__}: {e}"
    if spec.refusal is not None:
        result.add("[C0]", "engine-support", "FAIL", spec.refusal)
    elif spec.tensors is not None:
        types = sorted({t.qtype.name for t in spec.tensors.values()})
        result.add("[C0]", "engine-support", "PASS", f"architecture {spec.arch}; tensor types {', '.join(types)}")
    elif spec.arch in ARCHITECTURES:
        result.add("[C0]", "engine-support", "UNCONFIRMED",
                   f"architecture {spec.arch} from {spec.derived_from}; tensor types unknown until the header is read")
    else:
        result.add("[C0]", "engine-support", "FAIL",
                   f"architecture {spec.arch or 'unknown'}: Pantheon runs {', '.join(ARCHITECTURES)}")


def _disk_gate(result, models_dir):
    spec = result.spec
    if spec.size is None or models_dir is None:
        result.add("[C2a]", "disk", "SKIP", "no --models-dir" if models_dir is None else "size unknown")
        return
    result.dest, targets = spec.targets(models_dir)
    have = [_have(path, f.size) for f, path in targets]
    if all(done for done, _ in have):
        result.already = True
        result.add("[C2a]", "disk", "PASS", f"{result.dest} is already here ({human_bytes(spec.size)})")
        return
    kept = sum(n for _, n in have)
    need, free = spec.size - min(kept, spec.size), shutil.disk_usage(_existing(models_dir)).free
    resume = f" ({human_bytes(kept)} already in complete files and .part files)" if kept else ""
    status = "PASS" if need <= free else "FAIL"
    result.add("[C2a]", "disk", status, f"needs {human_bytes(need)}{resume} in {models_dir}, "
                                        f"{human_bytes(free)} free" + ("" if status == "PASS" else
                                                                      f": short by {human_bytes(need - free)}"))


def _have(path, size):
    """(complete, bytes already here): a complete file of the listed size, else its .part file."""
    if os.path.isfile(path) and os.path.getsize(path) == size:
        return True, size
    part = path + hub.PART_SUFFIX
    return False, os.path.getsize(part) if os.path.isfile(part) else 0


def _existing(path):
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    return path


def _fit_gate(result, dies, ctx, slots, mem, vram):
    spec = result.spec
    est = _estimate(spec, dies, ctx, slots)
    if est is None:
        result.add("[B]", "kv-calc", "REFUSED", f"cannot estimate {spec.name}: spec from {spec.derived_from}")
        return
    result.estimate = est
    cuda = [d for d in est.vram]
    free = {d: vram[d] for d in cuda if vram and d in vram}
    result.verdict = fit.verdict(est, mem[0], mem[1], free or (None if not cuda else {}))
    kv = f"KV {human_bytes(est.kv_per_token)}/token x ctx {est.ctx} x {slots} slots"
    result.add("[B]", "kv-calc", result.verdict.kind, f"{result.verdict.reason} ({kv})")


def _estimate(spec, dies, ctx, slots):
    path = spec.location
    if spec.tensors is not None and spec.refusal is None:
        return fit.estimate_from(spec.config, spec.tensors, path, dies, ctx, slots)
    if spec.row is None or spec.arch not in ARCHITECTURES or not spec.size:
        return None
    if any(d.startswith("cuda") for d in dies):
        spec.derived_from += "; a CUDA die's share needs the tensor types, which only the GGUF header gives"
        return None
    cfg = catalog.config_for(spec.arch, spec.row)
    # the weights are the file's bytes; the largest matrix (for the scratch tile) is the embedding
    blob = _Blob(shape=(spec.row["vocab"], spec.row["dim"]), n_bytes=spec.size)
    return fit.estimate_from(cfg, {"weights": blob}, path, dies, ctx, slots, check=False)


@dataclass(frozen=True)
class _Blob:
    """The whole file as one tensor record, when only its size is known."""

    shape: tuple
    n_bytes: int
    qtype: object = None


def _confidence_gate(result):
    """[C1]: how much of the spec is known, times the verdict -> download, accept (--yes) or stop."""
    spec = result.spec
    result.confidence = HIGH if spec.tensors is not None else (MEDIUM if spec.row is not None else LOW)
    kind = result.verdict.kind if result.verdict else fit.REFUSED
    if result.stopped_at is not None:
        result.action = STOP
    elif result.confidence == HIGH:
        result.action = PASS if kind == fit.FITS else ACCEPT
    elif result.confidence == MEDIUM and kind == fit.FITS:
        result.action = ACCEPT
    else:
        result.action = STOP
    why = {HIGH: f"{spec.derived_from.split(' (')[0]} read whole: the estimate is the one a load makes",
           MEDIUM: f"KV math from {spec.derived_from}, weights from the file size",
           LOW: f"no KV math ({spec.derived_from})"}[result.confidence]
    status = {PASS: "PASS", ACCEPT: "ACCEPT?", STOP: "FAIL"}[result.action]
    detail = f"confidence {result.confidence} ({why}) x {kind} -> {result.action}"
    result.add("[C1]", "confidence", status, detail)
