"""The serving core: settings, dies, memory pressure and fit, metrics, routing, the HTTP app, backends.

May import `pantheon.gguf`, `pantheon.text` and `pantheon.errors` freely. It reaches the engine only
where a process role runs one (the in-process `LocalBackend`), never from code the supervisor or a
front loads; it never imports `ipc` or `workers`.
"""
