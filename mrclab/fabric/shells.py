"""Shell scripts on many Mininet nodes at once: hosts and Linux routers are configured in parallel, one
script each, every script ending by echoing `ok`."""
from __future__ import annotations

from mininet.node import Host


def in_parallel(scripts: dict[Host, str]) -> dict[Host, str]:
    """Send one shell command to each Mininet node at once, then collect every output."""
    for node, script in scripts.items():
        node.sendCmd(script)
    return {node: node.waitOutput() for node in scripts}


def check_outputs(outputs: dict[Host, str]) -> None:
    """Each script ends by echoing `ok`; anything else is what went wrong."""
    for node, output in outputs.items():
        if not output.strip().endswith("ok"):
            raise RuntimeError(f"configuring {node.name} failed: {output.strip()}")
