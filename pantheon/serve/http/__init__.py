"""The OpenAI-compatible HTTP layer: Falcon resources over a Backend (in-process or ring-based)."""
