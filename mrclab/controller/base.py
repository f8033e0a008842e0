"""What every mrclab controller app shares: the fabric layout, flow-mod accounting, the stats file.

An app subclasses `FabricApp` and implements `boot_flows(switch)`: the flows a switch
gets when it first connects. Everything sent through `install` before the switch's
barrier reply counts as boot; anything after counts as `flow_mods_after_boot` (the
static app never sends any; a reconverging ECMP sibling would, through `install`).
A reconnecting switch keeps its flows (fail_mode=secure) and is not reprogrammed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from ..layout import Layout, SwitchLayout
from . import ofp, stats
from .flows import Flow

OPTIONS = [cfg.StrOpt("mrclab_layout", help="fabric layout JSON written by the builder"),
           cfg.StrOpt("mrclab_stats", help="stats JSON this app rewrites")]


class FabricApp(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    name_in_stats = "fabric"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        conf = cfg.CONF
        self.layout = Layout.from_dict(json.loads(Path(conf.mrclab_layout).read_text()))
        self.stats_path = Path(conf.mrclab_stats)
        self.doc = {"app": self.name_in_stats, "pid": os.getpid(), "port": conf.ofp_tcp_listen_port,
                    "switches": {name: {"dpid": s.dpid, "connected": False, "programmed": False, "connects": 0,
                                        "flow_mods": 0} for name, s in self.layout.switches.items()},
                    "flow_mods_boot": 0, "flow_mods_after_boot": 0, "packet_ins": 0, "errors": 0,
                    "unknown_dpids": []}
        self.by_dpid = {s.dpid: s for s in self.layout.switches.values()}
        self._save()

    def boot_flows(self, switch: SwitchLayout) -> list[Flow]:
        raise NotImplementedError

    def install(self, dp, flows: list[Flow]) -> None:
        switch = self.by_dpid[dp.id]
        entry = self.doc["switches"][switch.name]
        key = "flow_mods_after_boot" if entry["programmed"] else "flow_mods_boot"
        for flow in flows:
            dp.send_msg(ofp.flow_mod(dp, flow))
        entry["flow_mods"] += len(flows)
        self.doc[key] += len(flows)

    def _save(self) -> None:
        stats.write(self.stats_path, self.doc)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev) -> None:
        dp = ev.msg.datapath
        switch = self.by_dpid.get(dp.id)
        if switch is None:
            self.logger.error("unknown dpid %#x connected; ignoring it", dp.id)
            self.doc["unknown_dpids"].append(dp.id)
            self._save()
            return
        entry = self.doc["switches"][switch.name]
        entry["connects"] += 1
        entry["connected"] = True
        if entry["programmed"]:
            self.logger.warning("%s reconnected; its flows stay as they are", switch.name)
        else:
            flows = self.boot_flows(switch)
            self.install(dp, flows)
            dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
            self.logger.info("%s (dpid %#x): %d flows sent", switch.name, dp.id, len(flows))
        self._save()

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_barrier(self, ev) -> None:
        switch = self.by_dpid.get(ev.msg.datapath.id)
        if switch is not None and not self.doc["switches"][switch.name]["programmed"]:
            self.doc["switches"][switch.name]["programmed"] = True
            self.logger.info("%s programmed", switch.name)
            self._save()

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _on_state(self, ev) -> None:
        switch = self.by_dpid.get(ev.datapath.id)
        if switch is not None and ev.state == DEAD_DISPATCHER:
            self.doc["switches"][switch.name]["connected"] = False
            self._save()

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_packet_in(self, ev) -> None:
        self.doc["packet_ins"] += 1
        self._save()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev) -> None:
        self.logger.error("switch %#x error type=%s code=%s", ev.msg.datapath.id, ev.msg.type, ev.msg.code)
        self.doc["errors"] += 1
        self._save()


