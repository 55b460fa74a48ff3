"""Every ring and table of one pantheon-serve tree, created by the supervisor before it forks."""

from dataclasses import dataclass

from ipc import Channel, Segment
from pantheon.serve.metrics import Layout as MetricsLayout
from workers.tables import Tables, table_bytes

# Prompts travel to dies in continuation frames of this size; tokens come back in small frames.
REQUEST_SLOT = 4096
EVENT_SLOT = 128
CONTROL_SLOT = 512


@dataclass
class Layout:
    """Channels indexed by front f and die d; each has exactly one producer and one consumer process."""

    n_fronts: int
    n_dies: int
    to_sup: list  # [f]: front -> supervisor (SUBMIT, CANCEL)
    from_sup: list  # [f]: supervisor -> front (STATUS acks, ERROR)
    to_die: list  # [d]: supervisor -> die (SUBMIT, CANCEL, LOAD, UNLOAD)
    die_to_front: list  # [d][f]: die -> front (TOKENS, DONE, ERROR)
    die_to_sup: list  # [d]: die -> supervisor (DONE notices, STATUS)
    tables: Tables
    table_segment: Segment
    metrics: MetricsLayout  # rows 0..F-1: fronts; row F: the supervisor (queue depth, in-flight per die)
    metrics_rows: object  # float64 [F + 1, width] in shared memory
    metrics_segment: Segment
    die_list: list = None  # pantheon.serve.dies.Die per die index (plain data, inherited by fork)

    @classmethod
    def create(cls, n_fronts, n_dies, model_names=(), die_names=(), die_list=None):
        seg = Segment(table_bytes(n_dies))
        metrics = MetricsLayout(model_names, die_names)
        mseg = Segment(8 * metrics.width * (n_fronts + 1))
        return cls(
            n_fronts, n_dies,
            to_sup=[Channel(256, REQUEST_SLOT) for _ in range(n_fronts)],
            from_sup=[Channel(256, CONTROL_SLOT) for _ in range(n_fronts)],
            to_die=[Channel(256, REQUEST_SLOT) for _ in range(n_dies)],
            die_to_front=[[Channel(1024, EVENT_SLOT) for _ in range(n_fronts)] for _ in range(n_dies)],
            die_to_sup=[Channel(1024, CONTROL_SLOT) for _ in range(n_dies)],
            tables=Tables(seg.buf, n_dies), table_segment=seg,
            metrics=metrics, metrics_rows=metrics.table(n_fronts + 1, mseg.buf), metrics_segment=mseg,
            die_list=die_list)
