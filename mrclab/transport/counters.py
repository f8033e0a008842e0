"""Per-connection counters: plain integers the agent sums into ``results.json``."""
from __future__ import annotations

_FIELDS = (
    # sending half
    "data_sent",  # DATA packets put on the wire, retransmissions included
    "retransmitted",  # of which retransmissions
    "bytes_sent",  # payload bytes put on the wire, retransmissions included
    "trimmed",  # trim NACKs received: our packets a switch trimmed
    "lost",  # transmissions declared lost (RACK or timeout)
    "timeouts",  # retransmission timer expiries
    "probes",  # PROBEs sent
    "probe_replies",  # PROBE_REPLYs received
    "warm_probes",  # warm-up probes sent (one per path, Connection.warm), not counted in probes
    "warm_replies",  # ... and their replies
    "skips",  # EV turns skipped on trim NACK or ECN echo
    "paths_held",  # paths kept free of new data while a packet on them was overdue (see sender)
    "ev_retired",  # EVs marked ASSUMED_BAD
    "ev_restored",  # EVs brought back by probes
    "paths_retired",  # paths found bad (with ev_path, all their EVs at once; without, each EV is a path)
    "paths_restored",  # paths brought back by probes
    "spurious_losses",  # transmissions declared lost that were delivered after all (late, not lost)
    "retirements_undone",  # bad paths restored at once because the loss that condemned them was spurious
    "loss_at_min_active",  # losses that could not retire their EV (ev_min_active)
    "messages_completed",
    "messages_failed",
    # receiving half
    "data_received",  # DATA packets accepted (new, untrimmed)
    "bytes_received",  # payload bytes placed
    "duplicates",  # DATA packets already received
    "nacks",  # trim NACKs sent
    "sacks",  # SACKs sent
    "messages_delivered",
    "bytes_delivered",  # payload of delivered (digest-verified) messages
    "digest_failures",  # messages complete in length whose digest did not match: never delivered
    "malformed",  # datagrams that failed to decode or contradicted the connection's state
)


class Counters:
    __slots__ = _FIELDS

    def __init__(self) -> None:
        for name in _FIELDS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _FIELDS}

    def __repr__(self) -> str:
        return f"Counters({', '.join(f'{k}={v}' for k, v in self.as_dict().items() if v)})"
