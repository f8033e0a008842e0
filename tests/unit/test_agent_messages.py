"""The control protocol's messages: every one survives its line, and a line that is not one is refused by name."""
from __future__ import annotations

import json

import pytest

from mrclab.agent import messages
from mrclab.agent.messages import (
    Completed,
    Delivered,
    Done,
    EvChanged,
    Failed,
    NicChanged,
    Ping,
    Pong,
    Post,
    ProtocolError,
    Quit,
    Refused,
    Report,
    Stats,
    Warm,
    Warmed,
    answer_to,
    decode,
    encode,
)

EVERY_KIND = [
    Ping(1), Post("a", conn=3, peer=1, msg=7, size=1 << 20), Warm(2, conn=3, peer=1), Stats(None), Quit(4),
    Pong(1, host=3, pid=42, build={"build": "pure", "why": "MRCLAB_PURE=1"}), Done(2), Warmed(2, probes=8),
    Report(3, stats={"counters": {"data_sent": 5}, "ev_states": {}, "cpu_s": 0.5}), Refused(None, error="no"),
    Delivered(9, peer=3, msg=1, bytes=12345, verified=True, t=10.5), Completed(9, peer=3, msg=1, t=11.0),
    Failed(9, peer=3, msg=2, reason="payload_mismatch", t=11.25),
    EvChanged(9, peer=3, ev=17, old="GOOD", new="ASSUMED_BAD", t=12.0),
    NicChanged(1, state="down", t=12.5), NicChanged(1, state="up", t=13.0, of=3),
]


def test_every_kind_is_here_and_named_once():
    assert {type(m) for m in EVERY_KIND} == set(messages.TYPES.values())
    assert all(name == cls.TYPE for name, cls in messages.TYPES.items())


@pytest.mark.parametrize("message", EVERY_KIND, ids=lambda m: m.TYPE)
def test_a_message_survives_its_line(message):
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line, whatever its fields hold
    assert json.loads(line)["type"] == message.TYPE
    assert decode(line) == message and decode(line.decode()) == message


def test_a_whole_number_is_a_time_and_a_time_stays_a_float():
    event = decode(b'{"type": "completed", "conn": 1, "peer": 2, "msg": 3, "t": 4}')
    assert event == Completed(1, 2, 3, 4.0) and type(event.t) is float


def test_an_answer_is_checked_against_its_request():
    assert answer_to(Stats, Report(1, {})) == Report(1, {})
    with pytest.raises(ProtocolError, match="'ping' answered by 'done'"):
        answer_to(Ping, Done(1))


@pytest.mark.parametrize("line, fragment, request_id", [
    (b"not json", "not JSON", None),
    (b"[1, 2]", "JSON object", None),
    (b'{"id": 4}', "unknown message type None", 4),
    (b'{"type": "dance", "id": 4}', "unknown message type 'dance'", 4),
    (b'{"type": "ping"}', "'ping' has no 'id'", None),
    (b'{"type": "ping", "id": [1]}', "'id' as an integer or a string or null", None),
    (b'{"type": "post", "id": 5, "conn": 1, "peer": 1, "msg": 1}', "has no 'size'", 5),
    (b'{"type": "post", "id": 6, "conn": 1, "peer": -1, "msg": 1, "size": 1}', "'peer' as an integer in 0..", 6),
    (b'{"type": "post", "id": 7, "conn": 1, "peer": true, "msg": 1, "size": 1}', "'peer'", 7),
    (b'{"type": "post", "id": 7, "conn": 4294967296, "peer": 1, "msg": 1, "size": 1}', "'conn'", 7),
    (b'{"type": "ping", "id": 8, "extra": 1}', "takes no 'extra'", 8),
    (b'{"type": "delivered", "conn": 1, "peer": 1, "msg": 1, "bytes": 1, "verified": 1, "t": 1.0}',
     "'verified' as true or false", None),
    (b'{"type": "nic", "plane": 1, "state": "up", "t": "soon"}', "'t' as a number", None),
    (b'{"type": "nic", "plane": 1, "state": "up", "t": 1.0, "of": 1.5}', "'of' as an integer or null", None),
    (b'{"type": "report", "id": 3, "stats": []}', "'stats' as an object", 3),
])
def test_a_malformed_line_is_refused_by_name(line, fragment, request_id):
    with pytest.raises(ProtocolError) as err:
        decode(line)
    assert fragment in str(err.value)
    assert err.value.request_id == request_id
