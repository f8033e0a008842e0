"""Per-connection counters: plain integers the agent sums into ``results.json``."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True, repr=False)
class Counters:
    # sending half
    data_sent: int = 0  # DATA packets put on the wire, retransmissions included
    retransmitted: int = 0  # of which retransmissions
    bytes_sent: int = 0  # payload bytes put on the wire, retransmissions included
    trimmed: int = 0  # trim NACKs received: our packets a switch trimmed
    lost: int = 0  # transmissions declared lost (RACK or timeout)
    timeouts: int = 0  # retransmission timer expiries
    probes: int = 0  # PROBEs sent
    probe_replies: int = 0  # PROBE_REPLYs received
    warm_probes: int = 0  # warm-up probes sent (one per path, Connection.warm), not counted in probes
    warm_replies: int = 0  # ... and their replies
    skips: int = 0  # EVs made to skip on a trim NACK or an ECN echo
    ecn_skips: int = 0  # of which on an ECN echo: ECN's load balancing at work
    paths_held: int = 0  # paths kept free of new data while a packet on them was overdue (see sender)
    ev_retired: int = 0  # EVs marked ASSUMED_BAD
    ev_restored: int = 0  # EVs brought back by probes
    paths_retired: int = 0  # paths found bad (with ev_path, all their EVs at once; without, each EV is a path)
    paths_restored: int = 0  # paths brought back by probes
    spurious_losses: int = 0  # transmissions declared lost that were delivered after all (late, not lost)
    retirements_undone: int = 0  # bad paths restored at once because the loss that condemned them was spurious
    loss_at_min_active: int = 0  # losses that could not retire their EV (ev_min_active)
    go_backs: int = 0  # go-back-N (roce): times the sender went back to resend all in flight (a NAK or a timeout)
    messages_completed: int = 0
    messages_failed: int = 0
    # receiving half
    data_received: int = 0  # DATA packets accepted (new, untrimmed)
    bytes_received: int = 0  # payload bytes placed
    duplicates: int = 0  # DATA packets already received
    ce_received: int = 0  # DATA packets that arrived marked Congestion Experienced (IPv6 ECN)
    nacks: int = 0  # trim NACKs sent
    out_of_order: int = 0  # go-back-N (roce): DATA packets discarded because one before them is missing
    seq_naks: int = 0  # go-back-N (roce): sequence NAKs sent, one per gap
    sacks: int = 0  # SACKs sent
    messages_delivered: int = 0
    bytes_delivered: int = 0  # payload of delivered (digest-verified) messages
    digest_failures: int = 0  # messages complete in length whose digest did not match: never delivered
    malformed: int = 0  # datagrams that failed to decode or contradicted the connection's state

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in FIELDS}

    def __repr__(self) -> str:
        return f"Counters({', '.join(f'{k}={v}' for k, v in self.as_dict().items() if v)})"


FIELDS = tuple(field.name for field in fields(Counters))
