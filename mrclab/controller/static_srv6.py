"""Static SRv6 uSID routing: every switch gets its whole table once, at connect, and never again."""
from __future__ import annotations

from ..layout import SwitchLayout
from .base import FabricApp
from .flows import Flow, flows_for


class StaticSrv6(FabricApp):
    name_in_stats = "static_srv6"

    def boot_flows(self, switch: SwitchLayout) -> list[Flow]:
        return flows_for(switch.name, switch.ports)
