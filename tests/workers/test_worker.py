"""A die worker in this process (no fork): what it does with models it cannot run."""

from pantheon.serve.dies import Die
from tests.conftest import shared_path
from workers import protocol
from workers.protocol import Kind
from workers.layout import Layout
from workers.tables import SLOT_LOADING
from workers.worker import DieWorker


def worker_for(die, path):
    layout = Layout.create(1, 1, ["m"], [die.name], [die])
    layout.tables.write_slot(0, state=SLOT_LOADING, name="m", path=path, dies=1, batch_slots=1, max_sessions=1,
                             max_concurrent=1)
    notes = layout.die_to_sup[0].receiver()
    return DieWorker(layout, 0, die, [0], 1), layout, notes


def test_a_model_on_a_gpu_die_loads_the_gpu_engine():
    """The suite runs with numba's CUDA simulator (tests/conftest.py), so a CUDA die has an engine; the
    missing-CUDA-stack refusal is tests/workers/test_cuda_die.py's."""
    gpu = Die("cuda0", "cuda", 0, uuid="GPU-0", device_name="Fake", memory_total=1 << 34)
    worker, layout, _notes = worker_for(gpu, str(shared_path("golden", "llama-q8_0.gguf")))
    assert int(layout.tables.dies[0]["loaded"]) == 1 and int(layout.tables.dies[0]["failed"]) == 0
    assert type(worker.engines[0].model).__module__.startswith("pantheon.engine.cuda")


def test_a_model_on_a_cpu_die_loads():
    cpu = Die("cpu0", "cpu", 0, cores=(0,))
    worker, layout, _ = worker_for(cpu, str(shared_path("golden", "llama-q8_0.gguf")))
    assert int(layout.tables.dies[0]["loaded"]) == 1 and 0 in worker.engines


def test_an_engine_step_that_raises_ends_its_requests_with_an_error_and_the_worker_serves_on():
    """Not resubmitted (INTERNAL, not WORKER_DIED), and the die keeps serving the next request."""
    from pantheon.engine.sampler import SamplingParams
    from pantheon.engine.scheduler import Request

    cpu = Die("cpu0", "cpu", 0, cores=(0,))
    worker, layout, notes = worker_for(cpu, str(shared_path("golden", "llama-q8_0.gguf")))
    front = layout.die_to_front[0][0].receiver()
    engine, rid = worker.engines[0], protocol.request_id(0, 7)
    engine.add(Request(rid, (1, 2, 3), 3, SamplingParams(temperature=0.0)))
    worker.owner[rid], worker.rec["in_flight"] = 0, 1
    forward = engine.model.forward
    engine.model.forward = lambda *_: 1 / 0
    worker._route(worker._step(engine))
    msg = front.receive(timeout=1)
    assert msg.kind == Kind.ERROR and msg.request_id == rid
    err = protocol.decode_error(bytes(msg.payload))
    assert err.code == protocol.ErrorCode.INTERNAL and "ZeroDivisionError" in err.detail
    assert int(worker.rec["in_flight"]) == 0 and rid not in worker.owner
    engine.model.forward = forward
    engine.add(Request(rid + 1, (1, 2, 3), 2, SamplingParams(temperature=0.0)))
    while engine.has_work:
        worker._route(worker._step(engine))
    kinds = [front.receive(timeout=1).kind for _ in range(3)]
    assert kinds == [Kind.TOKENS, Kind.TOKENS, Kind.DONE]
