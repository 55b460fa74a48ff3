"""ModelCard: what a model list says of one served file (family, size, quantization), read from its header."""

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

import gguf

# general.file_type values as llama.cpp's quantize names them (Q4_K_M...), from gguf-py's LlamaFileType
_FILE_TYPES = {t.value: t.name.removeprefix("MOSTLY_").replace("ALL_", "") for t in gguf.LlamaFileType
               if t.name != "GUESSED"}


@dataclass(frozen=True)
class ModelCard:
    family: str  # general.architecture
    parameters: int  # elements of every tensor (0 when the weights were not opened)
    quantization: str  # llama.cpp's name of general.file_type, else the type holding most of the bytes
    size: int  # bytes of the file (or of the model directory's files)
    modified: str  # the file's modification time, RFC 3339 UTC
    digest: str  # sha256 of (real path, size, mtime): changes whenever the file is replaced
    format: str = "gguf"  # or "safetensors" for an HF model

    @property
    def parameter_size(self):
        """As Ollama prints it: "8.0B", "494.03M", "" when unknown."""
        n = self.parameters
        if n >= 10**9:
            return f"{n / 10**9:.1f}B"
        if n >= 10**6:
            return f"{n / 10**6:.2f}M"
        return f"{n / 10**3:.2f}K" if n else ""


def model_card(files, config):
    """The card of opened `files` (pantheon.source.open_files) with their ModelConfig; reads no weights."""
    tensors = getattr(files, "tensors", None) or {}
    size, mtime = _stat(files.path)
    digest = hashlib.sha256(f"{os.path.realpath(files.path)}\0{size}\0{mtime}".encode()).hexdigest()
    modified = datetime.fromtimestamp(mtime / 1e9, timezone.utc).isoformat().replace("+00:00", "Z")
    return ModelCard(config.arch, sum(_elements(t.shape) for t in tensors.values()),
                     _quantization(files.metadata, tensors), size, modified, digest,
                     "gguf" if files.path.endswith(".gguf") else "safetensors")


def _stat(path):
    """(bytes, mtime in ns) of a file, or of the files directly in a model directory."""
    if not os.path.isdir(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    stats = [e.stat() for e in os.scandir(path) if e.is_file()]
    return sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)


def _elements(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _quantization(metadata, tensors):
    file_type = metadata.get("general.file_type")
    if isinstance(file_type, int) and file_type in _FILE_TYPES:
        return _FILE_TYPES[file_type]
    weight = Counter()
    for t in tensors.values():
        weight[t.qtype.name] += t.raw.nbytes
    return weight.most_common(1)[0][0] if weight else ""
