"""`pantheon router`: the control plane that keeps a fleet of pantheon-serve instances behind HAProxy.

May import the standard library, `pantheon.errors` and `pantheon.serve.settings` (where environment
variables are read); never the engine, `pantheon.text`, `ipc` or `workers`: the router loads no model.
"""
