"""GGUF files as hostile input: the validated reader, the ggml type table and the model configuration.

Owns everything that is a fact of the file format. Pure Python and numpy only: it imports nothing else
from Pantheon but `pantheon.errors`, so the supervisor, fronts and tools can read a header without
loading numba.
"""
