"""Decode steps of n sequences, captured once per n and replayed: no per-kernel Python launch cost after that.

A decode step launches ~15 kernels per layer; from Python each launch costs tens of microseconds of
argument handling, against a few microseconds of GPU time for a small model's layer. The first step
of n rows runs eagerly on fixed arrays (its Workspace, the token ids, positions and slots, the
logits), then the same launches are captured (a CUDA graph per stage on a GPU, a tape of the
configured kernels in the simulator). Every later step of n rows writes its inputs into those arrays
and replays the capture. What changes from step to step (positions, slots, the number of keys
attended) is read by the kernels from device arrays, never baked into a launch as a scalar.
"""

import logging

import numpy as np

log = logging.getLogger(__name__)


class _StagePart:
    """One stage's fixed arrays for steps of n rows: inputs, residual stream and Workspace."""

    def __init__(self, stage, n):
        b = stage.backend
        b.activate()
        self.stage, self.backend = stage, b
        self.slot, self.pos = b.zeros((n,), np.int32), b.zeros((n,), np.int32)  # [n] each
        self.x = b.empty((n, stage.cfg.dim))  # [n, dim] the residual stream
        self.work = stage.workspace(n)
        self.replay = None


class DecodePlan:
    """Steps of `n` single-token segments through `model` (a GpuModel), each after the first one a replay."""

    def __init__(self, model, n):
        self.model, self.n = model, n
        self.parts = [_StagePart(s, n) for s in model.stages]
        first, last = self.parts[0].backend, self.parts[-1].backend
        first.activate()
        self.ids = first.zeros((n,), np.int32)  # [n]
        last.activate()
        self.normed = last.empty((n, model.config.dim))  # [n, dim]
        self.logits = last.empty((n, model.output.rows))  # [n, n_vocab]
        self.replays = 0
        self.capture_error = None  # why steps of n rows run eagerly, when a capture failed

    def run(self, ids, pos, slot):
        """float32 [n, n_vocab] (host) logits of one step: token ids[i] at pos[i] of KV slot slot[i]."""
        prev = None
        for k, part in enumerate(self.parts):
            b = part.backend
            b.activate()
            if k == 0:
                b.write(self.ids, ids)
            else:
                prev.backend.synchronize()
                b.write_from(part.x, prev.x)  # the one hop per stage boundary
            b.write(part.slot, slot)
            b.write(part.pos, pos)
            self._step(k, part)
            prev = part
        return prev.backend.to_host(self.logits)

    def _step(self, k, part):
        body = lambda: self._body(k, part)  # noqa: E731
        if self.capture_error is not None:
            body()
        elif part.replay is None:
            body()  # this step's result, computed eagerly; the capture below does not run the kernels
            part.replay = self._capture(part, body)
        else:
            part.replay()
            self.replays += 1

    def _capture(self, part, body):
        """The replay of body; None, with capture_error set (every step of n rows eager from now on), when the
        device refuses the capture."""
        try:
            return part.backend.capture(body)
        except AssertionError:
            raise  # body did more than launch: a bug, not a device limit
        except Exception as e:  # a driver or CuPy without stream capture: slower steps, same results
            self.capture_error = f"{type(e).__name__}: {e}"
            log.warning("decode steps of %d rows run uncaptured on cuda%d: %s", self.n, part.backend.ordinal,
                        self.capture_error)
            return None

    def _body(self, k, part):
        s, m = part.stage, self.model
        if k == 0:
            s.ops.embed(m.embd, self.ids, part.x)
        s.layers(part.x, part.slot, part.pos, part.work)
        if k == len(self.parts) - 1:
            m.head(s, part.x, self.normed, self.logits, part.work)
