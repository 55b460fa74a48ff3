import array
import struct

import pytest

from ipc import Channel, Kind
from ipc.errors import FrameError
from ipc.messages import (Sampling, decode_done, decode_error, decode_submit, decode_tokens,
                          encode_done, encode_error, encode_submit, encode_tokens)
from tests.ipc.forking import fork, wait


def test_submit_layout_is_fixed_little_endian():
    s = Sampling(max_tokens=7, top_k=40, temperature=0.5, seed=2**64 - 1)
    body = encode_submit(s, [1, 2**32 - 1], b"sess")
    assert len(body) == 56 + 8 + 4
    assert struct.unpack_from("<Ii", body) == (7, 40)
    assert struct.unpack_from("<f", body, 8) == (0.5,)
    assert body[56:64] == b"\x01\0\0\0\xff\xff\xff\xff"
    sub = decode_submit(body)
    assert sub.sampling == s and list(sub.prompt) == [1, 2**32 - 1] and sub.extra == b"sess"


def test_long_prompt_crosses_the_ring_as_continuations():
    ch = Channel(nslots=8, slot_size=256, max_message=1 << 20)
    prompt = array.array("I", range(50_000))  # 200 KB: ~920 fragments through 8 slots
    pid = fork(lambda: ch.sender().send(Kind.SUBMIT, 3, 0, encode_submit(Sampling(), prompt), 10))
    m = ch.receiver().receive(timeout=10)
    assert m.kind == Kind.SUBMIT and decode_submit(m.payload).prompt == prompt
    assert wait(pid) == 0


@pytest.mark.parametrize("body", [b"", b"\0" * 55, encode_submit(Sampling(), [1, 2]) + b"x",
                                  encode_submit(Sampling(), [1, 2])[:-1]])
def test_submit_length_checked(body):
    with pytest.raises(FrameError):
        decode_submit(body)


def test_tokens_done_error_roundtrip_and_checks():
    assert list(decode_tokens(encode_tokens([5, 6, 7]))) == [5, 6, 7]
    with pytest.raises(FrameError):
        decode_tokens(b"\0" * 5)
    d = decode_done(encode_done(2, 10, 20))
    assert (d.reason, d.prompt_tokens, d.completion_tokens) == (2, 10, 20)
    with pytest.raises(FrameError):
        decode_done(b"\0" * 3)
    e = decode_error(encode_error(500, b"worker died"))
    assert (e.code, e.detail) == (500, b"worker died")
    with pytest.raises(FrameError):
        decode_error(encode_error(1, b"abc")[:-1])
    with pytest.raises(FrameError):
        encode_error(1, b"x" * 70000)
