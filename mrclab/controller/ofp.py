"""Plain `flows.Flow` and `ecmp_flows.Group` entries -> OpenFlow 1.3 messages (os-ken), nothing else."""
from __future__ import annotations

from os_ken.ofproto import nicira_ext

from .ecmp_flows import Group
from .flows import IN_PORT, Flow


def _action(dp, action: tuple):
    parser, ofproto = dp.ofproto_parser, dp.ofproto
    kind = action[0]
    if kind == "move":
        _, src, src_ofs, dst, dst_ofs, n_bits = action
        return parser.NXActionRegMove(src_field=src, dst_field=dst, n_bits=n_bits, src_ofs=src_ofs, dst_ofs=dst_ofs)
    if kind == "load":
        _, dst, ofs, n_bits, value = action
        return parser.NXActionRegLoad(ofs_nbits=nicira_ext.ofs_nbits(ofs, ofs + n_bits - 1), dst=dst, value=value)
    if kind == "dec_ttl":
        return parser.OFPActionDecNwTtl()
    if kind == "set_field":
        return parser.OFPActionSetField(**{action[1]: action[2]})
    if kind == "output":
        return parser.OFPActionOutput(ofproto.OFPP_IN_PORT if action[1] == IN_PORT else action[1])
    if kind == "group":
        return parser.OFPActionGroup(action[1])
    raise ValueError(f"unknown action {action!r}")


def flow_mod(dp, flow: Flow):
    parser, ofproto = dp.ofproto_parser, dp.ofproto
    instructions = []
    if flow.actions:
        instructions.append(parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS,
                                                         [_action(dp, a) for a in flow.actions]))
    if flow.goto is not None:
        instructions.append(parser.OFPInstructionGotoTable(flow.goto))
    return parser.OFPFlowMod(dp, cookie=flow.cookie, table_id=flow.table, command=ofproto.OFPFC_ADD,
                             priority=flow.priority, match=parser.OFPMatch(**dict(flow.match)),
                             instructions=instructions)


def group_mod(dp, group: Group):
    """A select group; buckets watch no port, so only the controller takes a dead uplink out (see ecmp_flows)."""
    parser, ofproto = dp.ofproto_parser, dp.ofproto
    buckets = [parser.OFPBucket(weight=1, watch_port=ofproto.OFPP_ANY, watch_group=ofproto.OFPG_ANY,
                                actions=[parser.OFPActionOutput(port)]) for port in group.ports]
    command = ofproto.OFPGC_MODIFY if group.modify else ofproto.OFPGC_ADD
    return parser.OFPGroupMod(dp, command, ofproto.OFPGT_SELECT, group.group_id, buckets)


def message(dp, entry: Flow | Group):
    """The flow-mod or group-mod of one table entry."""
    return group_mod(dp, entry) if isinstance(entry, Group) else flow_mod(dp, entry)
