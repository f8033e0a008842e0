"""ECMP with reconvergence: the traditional fabric MRC is compared with (``routing: ecmp-reconverge``).

Switches route on destination host addresses, leaves hashing the 5-tuple over their
spine uplinks through one ECMP member table per destination leaf (see `ecmp_flows`).
When a leaf-spine link stops carrying traffic (a PORT_STATUS saying either end is down,
or a switch leaving the controller), the app does what BGP does in a large fabric: the
change takes ``convergence_delay`` seconds to reach the routing tables (timers, update
propagation, FIB programming), and then only the affected leaves are reprogrammed: a
dead (L, S) link takes S out of L's member tables and out of every other leaf's table
towards L; a dead spine takes itself out of every table of its plane. A link coming back is put
back after the same delay. Until then, flows hashed onto a dead link are lost, as in a
real fabric. Each change is scheduled with the link states seen when it happened, so a
flap replays in order, delay later.

Every flow-mod sent after boot counts in ``flow_mods_after_boot``. Each reconvergence that
changed something is logged and recorded in the stats file under ``reconvergences``:
``{t, trigger_t, trigger, switches, flow_mods}`` (``t``, ``trigger_t``: Unix times of the
reprogramming and of the event that caused it).
"""
from __future__ import annotations

import time

from os_ken import cfg
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub

from ..layout import SwitchLayout
from . import ecmp_flows
from .base import FabricApp
from .flows import Flow


class EcmpReconverge(FabricApp):
    name_in_stats = "ecmp_reconverge"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay = cfg.CONF.mrclab_convergence_delay
        self.peers = {(s.name, p.number): peer for s in self.layout.switches.values() for peer, p in s.ports.items()}
        self.down_ports: set[tuple[str, str]] = set()   # (switch, peer) whose port reports down
        self.disconnected: set[str] = set()
        self.seen = ecmp_flows.dead_links(self.layout, (), ())     # dead links as of the latest event
        self.applied = self.seen                                     # dead links the tables reflect
        self.datapaths: dict[str, object] = {}
        self.doc.update(convergence_delay_s=self.delay, reconvergences=[])
        self._save()

    def boot_flows(self, switch: SwitchLayout) -> list[Flow]:
        return ecmp_flows.entries_for(self.layout, switch.name, self.applied)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _on_connection(self, ev) -> None:
        switch = self.by_dpid.get(ev.datapath.id)
        if switch is None:
            return
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[switch.name] = ev.datapath
            if switch.name in self.disconnected:
                self.disconnected.discard(switch.name)
                self._changed(f"{switch.name} reconnected")
        elif self.datapaths.pop(switch.name, None) is ev.datapath:
            self.disconnected.add(switch.name)
            self._changed(f"{switch.name} disconnected")

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev) -> None:
        msg = ev.msg
        dp, ofproto, port = msg.datapath, msg.datapath.ofproto, msg.desc
        switch = self.by_dpid.get(dp.id)
        if switch is None:
            return
        peer = self.peers.get((switch.name, port.port_no))
        if peer is None:
            return
        down = (msg.reason == ofproto.OFPPR_DELETE or port.state & ofproto.OFPPS_LINK_DOWN
                or port.config & ofproto.OFPPC_PORT_DOWN)
        key = (switch.name, peer)
        if down and key not in self.down_ports:
            self.down_ports.add(key)
        elif not down and key in self.down_ports:
            self.down_ports.discard(key)
        else:
            return
        self._changed(f"{switch.name} port to {peer} {'down' if down else 'up'}")

    def _changed(self, trigger: str) -> None:
        """A port or switch changed: if the set of dead links did too, reprogram after the delay."""
        dead = ecmp_flows.dead_links(self.layout, self.down_ports, self.disconnected)
        if dead == self.seen:
            self.logger.info("%s: no leaf-spine link changed state", trigger)
            return
        self.seen = dead
        self.logger.info("%s: reconverging in %.3fs", trigger, self.delay)
        hub.spawn_after(self.delay, self._reconverge, trigger, time.time(), dead)

    def _reconverge(self, trigger: str, trigger_t: float, dead: ecmp_flows.DeadLinks) -> None:
        changes = ecmp_flows.reprogram(self.layout, self.applied, dead)
        self.applied = dead
        if not changes:  # e.g. a dead spine's second link: the first one already took it out of both leaves
            self.logger.info("%s: nothing to reprogram", trigger)
            return
        sent = 0
        for name, flows in changes.items():
            dp = self.datapaths.get(name)
            if dp is None:
                self.logger.warning("%s is not connected; its flows stay as they are", name)
                continue
            self.install(dp, flows)
            sent += len(flows)
            for flow in flows:
                self.logger.info("%s: %s", name, flow.to_ofctl())
        now = time.time()
        self.doc["reconvergences"].append({"t": now, "trigger_t": trigger_t, "trigger": trigger,
                                           "switches": sorted(changes), "flow_mods": sent})
        self.logger.info("reconverged %.3fs after %s: %d flow-mods to %s", now - trigger_t, trigger, sent,
                         ", ".join(sorted(changes)))
        self._save()
