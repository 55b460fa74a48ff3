"""Pantheon's bundled demo model: a tiny llama GGUF trained on CPython's pydoc topics."""

import pathlib

DEMO_GGUF = "pantheon-demo.gguf"


def demo_model_path():
    """Path of the bundled demo GGUF (pantheon/demo/pantheon-demo.gguf)."""
    return pathlib.Path(__file__).resolve().parent / DEMO_GGUF
