"""`pantheon-ctl`: the admin client of a running server and its local checks (fit).

Standard library plus `pantheon.serve` settings and fit; never the engine.
"""
