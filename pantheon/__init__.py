"""Pantheon: a multi-model LLM inference engine and server; this package is the engine library."""

__version__ = "0.1.0"

__all__ = ["__version__", "open_model", "open_tokenizer"]


def open_model(path, threads=None, quantize=False, config=None, repack=True, repack_dir=None):
    """Open a GGUF file or a HuggingFace model (directory, or .safetensors with `config`) zero-copy;
    see docs/python-api.md."""
    from pantheon.engine.model import open_model as _open_model

    return _open_model(path, threads=threads, quantize=quantize, config=config, repack=repack,
                       repack_dir=repack_dir)


def open_tokenizer(path, config=None):
    """Open only the tokenizer of a GGUF file (vocabulary-only files included) or of an HF model."""
    from pantheon.source import is_hf, open_text

    if is_hf(path, config):
        return open_text(path, config)[0]
    from pantheon.text.tokenizer import open_tokenizer as _open_tokenizer

    return _open_tokenizer(path)
