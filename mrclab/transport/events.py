"""What a connection tells its owner, through ``Connection.pop_events()`` (plus ``ev.EvStateChanged``)."""
from __future__ import annotations

from typing import NamedTuple


class MessageDelivered(NamedTuple):
    """Receiver: every byte arrived and the digest matched. ``data`` is the receive buffer itself."""

    msg_id: int
    data: bytearray


class MessageCompleted(NamedTuple):
    """Sender: every packet of the message was acknowledged."""

    msg_id: int


class MessageFailed(NamedTuple):
    """``reason``: ``digest_mismatch`` (receiver) or ``retries_exhausted`` (sender; the connection is dead, or was
    when the message was posted)."""

    msg_id: int
    reason: str


class NicStateChanged(NamedTuple):
    """The planes whose NIC is down changed, at this end (``local``, from the owner) or at the far end
    (``remote``, from its SACKs); bitmaps, bit k for plane k."""

    local: int
    remote: int
    now: float
