"""Text in and out of token ids: tokenizers and pre-tokenizers, detokenizer, chat templates, prompting.

Runs in the HTTP fronts and the `pantheon` CLI. May import `pantheon.gguf` (to read a vocabulary) and
`pantheon.errors`; never the engine, so a front never loads numba.
"""
