"""Plain `flows.Flow` entries -> OpenFlow 1.3 messages (os-ken), nothing else."""
from __future__ import annotations

from os_ken.ofproto import nicira_ext

from .flows import IN_PORT, Flow

NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP = 3  # OVS nicira-ext.h enum nx_hash_fields; os-ken does not name it


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
    if kind == "multipath":
        _, n_links, dst = action
        return parser.NXActionMultipath(fields=NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, basis=0,
                                        algorithm=nicira_ext.NX_MP_ALG_MODULO_N, max_link=n_links - 1, arg=0,
                                        ofs_nbits=nicira_ext.ofs_nbits(0, 15), dst=dst)
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
