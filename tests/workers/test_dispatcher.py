"""The dispatcher in this process over real rings: routing, queueing, refusals, die deaths, admin hand-off."""

import json

import pytest

from pantheon.engine.sampler import SamplingParams
from workers import protocol
from workers.commands import DieFailed, EmptySlot, FailDie, SlotEmptied
from workers.dispatcher import CRITICAL, Dispatcher
from workers.layout import Layout
from workers.protocol import ErrorCode, Job, Kind
from workers.tables import DIE_UP, SLOT_LOADED


class Rig:
    """Two fronts, two dies, one model slot on both dies; the test plays fronts and dies by hand."""

    def __init__(self, max_concurrent=1, dies_up=(0, 1)):
        self.layout = Layout.create(2, 2, ["m"], ["cpu0", "cpu1"])
        self.layout.tables.write_slot(0, state=SLOT_LOADED, name="m", path="/m.gguf", dies=0b11,
                                      max_concurrent=max_concurrent, batch_slots=1)
        for d in dies_up:
            self.layout.tables.dies[d]["state"] = DIE_UP
            self.layout.tables.dies[d]["loaded"] = 1
        self.dispatcher = Dispatcher(self.layout)
        self.fronts = [c.sender() for c in self.layout.to_sup]
        self.front_in = [c.receiver() for c in self.layout.from_sup]
        self.die_in = [c.receiver() for c in self.layout.to_die]
        self.die_out = [c.sender() for c in self.layout.die_to_sup]

    def submit(self, rid, front=0, session=0, slot=0, prompt=(1, 2, 3)):
        body = protocol.encode_job(Job(slot, prompt, 8, SamplingParams(repeat_last_n=5), session=session))
        self.fronts[front].send(Kind.SUBMIT, rid, 0, body, timeout=1)
        self.dispatcher.run_once(0.01)
        return body

    def answer(self, front=0):
        msg = self.front_in[front].receive(timeout=1)
        assert msg is not None, "the dispatcher did not answer"
        return msg

    def done(self, die, rid):
        self.die_out[die].send(Kind.DONE, rid, 0, protocol.encode_done("stop", 3, 0, 1), timeout=1)
        self.dispatcher.run_once(0.01)


def error_of(msg):
    assert msg.kind == Kind.ERROR, msg.kind
    return protocol.decode_error(bytes(msg.payload))


def test_a_job_goes_to_a_live_replica_byte_for_byte():
    rig = Rig()
    body = rig.submit(rid=7)
    ack = rig.answer()
    die = protocol.decode_accepted(bytes(ack.payload))
    assert (ack.kind, ack.request_id, die in (0, 1)) == (Kind.ACCEPTED, 7, True)
    got = rig.die_in[die].receive(timeout=1)
    assert (got.kind, got.request_id, bytes(got.payload)) == (Kind.SUBMIT, 7, body)
    assert rig.die_in[1 - die].receive(timeout=0) is None


def test_load_spreads_over_replicas_then_queues_then_starts_on_done():
    rig = Rig(max_concurrent=1)
    dies = []
    for rid in (1, 2):
        rig.submit(rid)
        dies.append(protocol.decode_accepted(bytes(rig.answer().payload)))
    assert sorted(dies) == [0, 1]
    rig.submit(3)
    assert protocol.decode_accepted(bytes(rig.answer().payload)) == protocol.QUEUED
    assert rig.dispatcher.slot_in_flight(0) == 3
    rig.done(dies[1], 2)
    assert [m.request_id for m in iter(lambda: rig.die_in[dies[1]].receive(timeout=0.1), None)] == [2, 3]
    assert [m.request_id for m in iter(lambda: rig.die_in[dies[0]].receive(timeout=0.1), None)] == [1]


def test_a_full_queue_is_overloaded_with_a_retry_hint():
    rig = Rig(max_concurrent=1, dies_up=(0,))
    for rid in (1, 2):
        rig.submit(rid)
        rig.answer()
    rig.submit(3)
    err = error_of(rig.answer())
    assert err.code == ErrorCode.OVERLOADED and err.retry_after >= 1


def test_no_live_replica_and_critical_pressure_are_unavailable():
    rig = Rig(dies_up=())
    rig.submit(1)
    err = error_of(rig.answer())
    assert (err.code, err.retry_after, err.detail) == (ErrorCode.UNAVAILABLE, 1.0, "no live replica of this model")
    rig = Rig()
    rig.layout.tables.instance[0]["pressure"] = CRITICAL
    rig.submit(2)
    err = error_of(rig.answer())
    assert (err.code, err.retry_after) == (ErrorCode.UNAVAILABLE, 5.0) and "CRITICAL" in err.detail


@pytest.mark.parametrize("body", [b"", b"\0" * 15])
def test_a_body_without_a_routing_header_is_a_bad_request(body):
    rig = Rig()
    rig.fronts[1].send(Kind.SUBMIT, 9, 0, body, timeout=1)
    rig.dispatcher.run_once(0.01)
    assert error_of(rig.answer(front=1)).code == ErrorCode.BAD_REQUEST


def test_an_unknown_slot_is_unavailable_not_a_crash():
    rig = Rig()
    rig.submit(4, slot=900)
    assert error_of(rig.answer()).code == ErrorCode.UNAVAILABLE


def test_a_session_returns_to_its_die_while_it_is_not_clearly_busier():
    rig = Rig(max_concurrent=4)
    rig.submit(1, session=42)
    home = protocol.decode_accepted(bytes(rig.answer().payload))
    rig.submit(2)  # a request without a session goes to the idle die
    assert protocol.decode_accepted(bytes(rig.answer().payload)) == 1 - home
    rig.done(home, 1)
    for rid in (3, 4):  # the other die is busier now, the session still goes home
        rig.submit(rid, session=42)
        assert protocol.decode_accepted(bytes(rig.answer().payload)) == home


def test_a_prompt_prefix_returns_to_the_die_that_cached_it_until_that_die_is_clearly_busier():
    rig = Rig(max_concurrent=8)
    system = tuple(range(100, 164))  # four full blocks: the affinity key
    rig.submit(1, prompt=system + (1, 2))
    home = protocol.decode_accepted(bytes(rig.answer().payload))
    rig.submit(2, prompt=(9,) * 70)  # another prefix goes to the idle die
    assert protocol.decode_accepted(bytes(rig.answer().payload)) == 1 - home
    rig.done(1 - home, 2)
    rig.submit(3, prompt=system + (7, 7, 7))  # home is busier by one: not clearly, the prefix goes home
    assert protocol.decode_accepted(bytes(rig.answer().payload)) == home
    rig.submit(4, prompt=system + (8,))  # home holds two, the other none: clearly busier, least busy wins
    assert protocol.decode_accepted(bytes(rig.answer().payload)) == 1 - home
    rig.submit(5, prompt=system + (9,))  # and the prefix follows it there
    assert protocol.decode_accepted(bytes(rig.answer().payload)) == 1 - home


def test_a_dead_die_ends_its_requests_with_worker_died():
    rig = Rig(max_concurrent=1)
    rig.submit(1, front=1)
    die = protocol.decode_accepted(bytes(rig.answer(front=1).payload))
    rig.dispatcher.fail_die(die, "worker of die cpu0 exited with -9")
    err = error_of(rig.answer(front=1))
    assert (err.code, err.detail) == (ErrorCode.WORKER_DIED, "worker of die cpu0 exited with -9")
    assert rig.dispatcher.in_flight(die) == 0


def test_cancelling_a_queued_request_ends_it():
    rig = Rig(max_concurrent=1, dies_up=(0,))
    rig.submit(1)
    rig.answer()
    rig.submit(2)
    rig.answer()
    rig.fronts[0].send(Kind.CANCEL, 2, 0, timeout=1)
    rig.dispatcher.run_once(0.01)
    assert error_of(rig.answer()).code == ErrorCode.CANCELLED
    rig.fronts[0].send(Kind.CANCEL, 1, 0, timeout=1)
    rig.dispatcher.run_once(0.01)
    assert [m.kind for m in (rig.die_in[0].receive(timeout=1), rig.die_in[0].receive(timeout=1))] == [
        Kind.SUBMIT, Kind.CANCEL]


def test_admin_requests_go_to_the_main_thread_and_replies_come_back():
    rig = Rig()
    rig.fronts[1].send(Kind.ADMIN_UNLOAD, 5, 0, b'{"name": "m"}', timeout=1)
    rig.dispatcher.run_once(0.01)
    assert rig.dispatcher.admin_inbox.get_nowait() == (1, 5, Kind.ADMIN_UNLOAD, b'{"name": "m"}')
    rig.dispatcher.reply(1, 5, 404, {"error": {"message": "no"}})
    msg = rig.answer(front=1)
    assert (msg.kind, json.loads(bytes(msg.payload))) == (Kind.ADMIN_REPLY, {"status": 404,
                                                                             "body": {"error": {"message": "no"}}})


def test_a_slot_failure_note_is_kept_for_the_supervisor():
    rig = Rig()
    rig.die_out[1].send(Kind.SLOT_FAILED, 0, 0, protocol.encode_slot(0, "failed: BadMagic"), timeout=1)
    rig.dispatcher.run_once(0.01)
    assert list(rig.dispatcher.status_notes) == [(1, 0, "failed: BadMagic")]


def test_commands_from_the_main_thread_are_typed_and_answered():
    rig = Rig(max_concurrent=1, dies_up=(0,))
    rig.submit(1)
    rig.answer()
    rig.submit(2)  # queued behind request 1
    rig.answer()
    rig.dispatcher.commands.put(EmptySlot(0, (0,)))
    rig.dispatcher.run_once(0.01)
    assert rig.dispatcher.to_main.get_nowait() == SlotEmptied(0, 2)
    assert error_of(rig.answer()).code == ErrorCode.UNAVAILABLE  # the queued one
    got = [m.kind for m in iter(lambda: rig.die_in[0].receive(timeout=0.1), None)]
    assert got == [Kind.SUBMIT, Kind.UNLOAD_SLOT]
    rig.die_out[0].send(Kind.SLOT_FAILED, 0, 0, protocol.encode_slot(0, "failed: x"), timeout=1)
    rig.dispatcher.commands.put(FailDie(0, "exited with 3", final=True))
    rig.dispatcher.run_once(0.01)
    assert rig.dispatcher.to_main.get_nowait() == DieFailed(0, "exited with 3", ((0, 0, "failed: x"),))
    with pytest.raises(TypeError):
        rig.dispatcher._command(lambda: None)  # closures are not messages
