"""One way to open any model Pantheon serves: a GGUF file, or a HuggingFace directory (or a
safetensors file with its config.json). Callers never branch on the format."""

import os


def is_hf(path, config=None):
    """True when `path` (with `config`) names an HF model rather than a GGUF file."""
    from pantheon.hf.directory import is_hf as _is_hf

    return _is_hf(path, config)


def open_files(path, config=None, tensors=True):
    """(files, ModelConfig): files has .path, .metadata and .tensors ({GGUF name: TensorInfo}, empty
    for an HF model opened with tensors=False). Typed PantheonError subclasses name what is wrong."""
    path = os.fspath(path)
    if config and path.endswith(".gguf"):
        from pantheon.hf.directory import HFLayoutError

        raise HFLayoutError(f"{path} is a GGUF file: a config.json applies only to safetensors weights")
    if is_hf(path, config):
        from pantheon.hf.directory import open_hf

        files = open_hf(path, config, tensors=tensors)
        return files, files.config
    from pantheon.gguf.config import config_from_metadata
    from pantheon.gguf.file import open_gguf

    files = open_gguf(path)
    return files, config_from_metadata(files.metadata)


def model_config(path, config=None):
    """The ModelConfig alone (no HF weight file is opened)."""
    return open_files(path, config, tensors=False)[1]


def text_side(files):
    """(tokenizer, metadata for the chat template) of opened files; runs in the front processes."""
    hf_config = getattr(files, "hf_config", None)
    if hf_config is not None:
        from pantheon.text.hf_text import open_hf_text

        return open_hf_text(files.text_dir, hf_config)
    from pantheon.text.tokenizer import Tokenizer

    return Tokenizer.from_metadata(files.metadata), files.metadata


def open_text(path, config=None):
    """(tokenizer, chat metadata, ModelConfig) of the model at `path`, weights untouched."""
    files, cfg = open_files(path, config, tensors=False)
    tok, meta = text_side(files)
    return tok, meta, cfg
