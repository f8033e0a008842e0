"""Switch-port egress: HTB shaping and the eBPF trimmer / fault injector (being built; see issue 6)."""
from __future__ import annotations

from ..check import Row


def check_row() -> Row:
    return Row("ebpf trimming", False, "not built yet", "", required=False)
