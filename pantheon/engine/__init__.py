"""The inference engine: weights bound to the forward pass, numba kernels, KV cache, sampler, scheduler.

The only package that imports numba. It may import `pantheon.gguf` and `pantheon.errors`, never the
text, serving or transport layers, so it can be driven from a REPL with token ids alone.
"""
