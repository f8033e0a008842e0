-- MRC (Multipath Reliable Connection) v1 for Wireshark and tshark, shipped with mrclab.
--
-- Decodes every packet of mrclab/transport/wire.py (DATA, SACK, NACK, PROBE, PROBE_REPLY, their
-- flags and echoes) and the SRv6 uSID path of the IPv6 destination (mrclab/addressing.py):
-- plane, leaves, spine, host and the uSIDs still to be consumed at the point of capture.
--
--   tshark -X lua_script:mrc.lua -r all.pcapng -Y 'mrc.flags.trimmed'
--   `mrclab wireshark` prints this file's path and how to install it for good.
--
-- Preferences (Edit > Preferences > Protocols > MRC, or -o mrc.NAME:VALUE):
--   udp_port         the MRC UDP port (4793)
--   usid_block_bits  locator block length in bits (32: fcbb:<plane>)
--   usid_node_bits   micro-SID length in bits (16)

local mrc = Proto("mrc", "Multipath Reliable Connection")

local DATA, SACK, NACK, PROBE, PROBE_REPLY = 1, 2, 3, 4, 5
local TYPES = {[DATA] = "DATA", [SACK] = "SACK", [NACK] = "NACK", [PROBE] = "PROBE", [PROBE_REPLY] = "PROBE_REPLY"}
local LENGTHS = {[SACK] = 48, [NACK] = 28, [PROBE] = 24, [PROBE_REPLY] = 24}
local DATA_HEADER_LEN = 48
local WARM_SEQ = 0xFFFFFFFF
local TRIMMED, LAST, RETX, ECN = 0x1, 0x2, 0x4, 0x8
local DUP_ECHO = 0x10
local ALLOWED_FLAGS = {[DATA] = 0x0F, [SACK] = 0x18, [NACK] = 0, [PROBE] = 0, [PROBE_REPLY] = 0}
local DEFAULT_PORT = 4793

local f = {
    version = ProtoField.uint8("mrc.version", "Version", base.DEC),
    type = ProtoField.uint8("mrc.type", "Type", base.DEC, TYPES),
    flags = ProtoField.uint16("mrc.flags", "Flags", base.HEX),
    trimmed = ProtoField.bool("mrc.flags.trimmed", "TRIMMED (a switch cut the payload)", 16, nil, TRIMMED),
    last = ProtoField.bool("mrc.flags.last", "LAST (last packet of its message)", 16, nil, LAST),
    retx = ProtoField.bool("mrc.flags.retx", "RETX (a retransmission)", 16, nil, RETX),
    ecn_ce = ProtoField.bool("mrc.flags.ecn_ce", "ECN_CE (congestion experienced)", 16, nil, ECN),
    ecn_echo = ProtoField.bool("mrc.flags.ecn_echo", "ECN_ECHO", 16, nil, ECN),
    dup_echo = ProtoField.bool("mrc.flags.dup_echo", "DUP_ECHO (answers a duplicate)", 16, nil, DUP_ECHO),
    conn = ProtoField.uint32("mrc.conn", "Connection", base.DEC),
    psn = ProtoField.uint32("mrc.psn", "PSN", base.DEC),
    msg_id = ProtoField.uint32("mrc.msg_id", "Message", base.DEC),
    msg_len = ProtoField.uint32("mrc.msg_len", "Message length", base.DEC),
    offset = ProtoField.uint32("mrc.offset", "Offset", base.DEC),
    length = ProtoField.uint16("mrc.length", "Payload length", base.DEC),
    ev = ProtoField.uint16("mrc.ev", "Entropy value (path)", base.DEC),
    ts = ProtoField.uint64("mrc.ts", "Timestamp (ns)", base.DEC),
    digest = ProtoField.uint64("mrc.digest", "Message digest (XXH3-64)", base.HEX),
    reserved = ProtoField.bytes("mrc.reserved", "Reserved"),
    payload = ProtoField.bytes("mrc.payload", "Payload"),
    cum_psn = ProtoField.uint32("mrc.cum_psn", "Cumulative PSN (all below arrived)", base.DEC),
    sack_base = ProtoField.uint32("mrc.sack.base", "SACK base PSN", base.DEC),
    bitmap = ProtoField.uint64("mrc.sack.bitmap", "SACK bitmap", base.HEX),
    sacked = ProtoField.uint32("mrc.sack.psn", "Arrived PSN", base.DEC),
    sacked_count = ProtoField.uint8("mrc.sack.count", "PSNs in the bitmap", base.DEC),
    ack_psn = ProtoField.uint32("mrc.ack_psn", "Acknowledged PSN (triggered this SACK)", base.DEC),
    ecn_count = ProtoField.uint16("mrc.ecn_count", "CE-marked packets since the previous SACK", base.DEC),
    ts_echo = ProtoField.uint64("mrc.ts_echo", "Timestamp echo (ns)", base.DEC),
    ack_delay = ProtoField.uint32("mrc.ack_delay", "ACK delay (ns)", base.DEC),
    nic_down = ProtoField.uint16("mrc.nic_down", "NICs down (bit k: plane k)", base.HEX),
    reason = ProtoField.uint8("mrc.nack.reason", "NACK reason", base.DEC, {[1] = "TRIMMED", [2] = "SEQUENCE"}),
    seq = ProtoField.uint32("mrc.probe.seq", "Probe sequence", base.DEC),
    warm = ProtoField.bool("mrc.probe.warm", "Warm-up probe"),
    path = ProtoField.string("mrc.path", "uSID path"),
    plane = ProtoField.uint16("mrc.path.plane", "Plane", base.DEC),
    leaf = ProtoField.uint16("mrc.path.leaf", "Leaf", base.DEC),
    spine = ProtoField.uint16("mrc.path.spine", "Spine", base.DEC),
    host = ProtoField.uint16("mrc.path.host", "Host", base.DEC),
    usid = ProtoField.uint32("mrc.path.usid", "uSID", base.HEX),
    next_usid = ProtoField.uint32("mrc.path.next", "Next uSID (the next switch's)", base.HEX),
    remaining = ProtoField.uint8("mrc.path.remaining", "uSIDs remaining", base.DEC),
}
mrc.fields = {}
for _, field in pairs(f) do table.insert(mrc.fields, field) end

local e_trimmed = ProtoExpert.new("mrc.trimmed", "Trimmed by a switch: payload cut, the receiver NACKs it",
                                  expert.group.SEQUENCE, expert.severity.NOTE)
local e_retx = ProtoExpert.new("mrc.retransmission", "Retransmission", expert.group.SEQUENCE, expert.severity.NOTE)
local e_nack = ProtoExpert.new("mrc.nack", "NACK: a trimmed packet is asked for again",
                               expert.group.SEQUENCE, expert.severity.NOTE)
local e_bad = ProtoExpert.new("mrc.malformed", "Malformed MRC packet", expert.group.MALFORMED, expert.severity.ERROR)
mrc.experts = {e_trimmed, e_retx, e_nack, e_bad}

mrc.prefs.udp_port = Pref.uint("UDP port", DEFAULT_PORT, "UDP port MRC agents send to and from")
mrc.prefs.usid_block_bits = Pref.uint("uSID block length (bits)", 32,
                                      "Locator block length: fcbb:<plane> is 32 bits")
mrc.prefs.usid_node_bits = Pref.uint("uSID node length (bits)", 16, "Length of one micro-SID")

local ipv6_dst = Field.new("ipv6.dst")

-- `count` bits of a ByteArray starting at bit `start` (big-endian), as a number (count <= 32).
local function bits(bytes, start, count)
    local value = 0
    for i = start, start + count - 1 do
        local byte = bytes:get_index(math.floor(i / 8))
        value = value * 2 + bit32.band(bit32.rshift(byte, 7 - i % 8), 1)
    end
    return value
end

-- mrclab's uN values: leaf 0x1000+j, spine 0x2000+i, host 0x4000+n.
local function usid_kind(value, node_bits)
    if node_bits ~= 16 then return nil end
    if value >= 0x4000 then return "host", value - 0x4000 end
    if value >= 0x2000 then return "spine", value - 0x2000 end
    if value >= 0x1000 then return "leaf", value - 0x1000 end
    return nil
end

-- The uSID path of the last IPv6 destination of this frame, as {plane=, usids={{value, kind, index}...}}.
local function usid_path()
    local fields = {ipv6_dst()}
    local dst = fields[#fields]
    if dst == nil then return nil end
    local bytes = dst.range:bytes()
    local block_bits, node_bits = mrc.prefs.usid_block_bits, mrc.prefs.usid_node_bits
    if bytes:len() ~= 16 or bits(bytes, 0, 16) ~= 0xFCBB or block_bits < 16 or block_bits > 128
        or node_bits < 8 or node_bits > 32 then
        return nil
    end
    local path = {plane = bits(bytes, 16, math.min(block_bits, 32) - 16), usids = {}}
    local at = block_bits
    while at + node_bits <= 128 do
        local value = bits(bytes, at, node_bits)
        if value == 0 then break end
        local kind, index = usid_kind(value, node_bits)
        table.insert(path.usids, {value = value, kind = kind, index = index})
        at = at + node_bits
    end
    return path
end

local SHORT = {leaf = "l", spine = "s", host = "h"}

local function add_path(tree, path)
    local names = {"p" .. path.plane}
    for _, u in ipairs(path.usids) do
        table.insert(names, u.kind and (SHORT[u.kind] .. u.index) or string.format("0x%x", u.value))
    end
    local sub = tree:add(f.path, table.concat(names, " ")):set_generated()
    sub:add(f.plane, path.plane):set_generated()
    sub:add(f.remaining, #path.usids):set_generated()
    if path.usids[1] then sub:add(f.next_usid, path.usids[1].value):set_generated() end
    for _, u in ipairs(path.usids) do
        sub:add(f.usid, u.value):set_generated()
        if u.kind then sub:add(f[u.kind], u.index):set_generated() end
    end
end

local function path_text(path)
    if path == nil then return "" end
    local text = " p" .. path.plane
    for _, u in ipairs(path.usids) do
        if u.kind == "spine" then return text .. " s" .. u.index end
    end
    return text
end

local function flag_names(flags, kind)
    local names = {}
    local table_ = kind == DATA and {{TRIMMED, "TRIMMED"}, {RETX, "RETX"}, {LAST, "LAST"}, {ECN, "ECN_CE"}}
        or {{ECN, "ECN_ECHO"}, {DUP_ECHO, "DUP_ECHO"}}
    for _, pair in ipairs(table_) do
        if bit32.btest(flags, pair[1]) then table.insert(names, pair[2]) end
    end
    return #names > 0 and (" " .. table.concat(names, " ")) or ""
end

local function malformed(tree, text)
    tree:add_proto_expert_info(e_bad, text)
end

local function check_reserved(tree, range)
    local item = tree:add(f.reserved, range)
    for i = 0, range:len() - 1 do
        if range:range(i, 1):uint() ~= 0 then
            malformed(tree, "reserved bytes are not zero")
            return item
        end
    end
    return item
end

local function dissect_data(tvb, tree, flags)
    local reported = tvb:reported_len()
    tree:add(f.conn, tvb(4, 4))
    tree:add(f.psn, tvb(8, 4))
    tree:add(f.msg_id, tvb(12, 4))
    tree:add(f.msg_len, tvb(16, 4))
    tree:add(f.offset, tvb(20, 4))
    tree:add(f.length, tvb(24, 2))
    tree:add(f.ev, tvb(26, 2))
    tree:add(f.ts, tvb(28, 8))
    tree:add(f.digest, tvb(36, 8))
    check_reserved(tree, tvb(44, 4))
    local length, carried = tvb(24, 2):uint(), reported - DATA_HEADER_LEN
    if tvb(20, 4):uint() + length > tvb(16, 4):uint() then
        malformed(tree, "offset + length exceeds the message length")
    end
    local expected = bit32.btest(flags, TRIMMED) and 0 or length
    if carried ~= expected then
        malformed(tree, string.format("carries %d payload bytes, header says %d", carried, expected))
    end
    local captured = tvb:len() - DATA_HEADER_LEN
    if captured > 0 then tree:add(f.payload, tvb(DATA_HEADER_LEN, captured)) end
    if bit32.btest(flags, TRIMMED) then tree:add_proto_expert_info(e_trimmed) end
    if bit32.btest(flags, RETX) then tree:add_proto_expert_info(e_retx) end
    return string.format("conn %d psn %d ev %d", tvb(4, 4):uint(), tvb(8, 4):uint(), tvb(26, 2):uint())
end

local function dissect_sack(tvb, tree)
    tree:add(f.conn, tvb(4, 4))
    tree:add(f.cum_psn, tvb(8, 4))
    tree:add(f.sack_base, tvb(12, 4))
    local bitmap = tree:add(f.bitmap, tvb(16, 8))
    local base_psn, hi, lo = tvb(12, 4):uint(), tvb(16, 4):uint(), tvb(20, 4):uint()
    local count = 0
    for i = 0, 63 do
        local word, shift = (i < 32) and lo or hi, i % 32
        if bit32.btest(word, bit32.lshift(1, shift)) then
            bitmap:add(f.sacked, tvb(i < 32 and 20 or 16, 4), (base_psn + i) % 4294967296):set_generated()
            count = count + 1
        end
    end
    bitmap:add(f.sacked_count, count):set_generated()
    tree:add(f.ack_psn, tvb(24, 4))
    tree:add(f.ev, tvb(28, 2))
    tree:add(f.ecn_count, tvb(30, 2))
    tree:add(f.ts_echo, tvb(32, 8))
    tree:add(f.ack_delay, tvb(40, 4))
    tree:add(f.nic_down, tvb(44, 2))
    check_reserved(tree, tvb(46, 2))
    return string.format("conn %d cum %d ack %d ev %d sacked %d", tvb(4, 4):uint(), tvb(8, 4):uint(),
                         tvb(24, 4):uint(), tvb(28, 2):uint(), count)
end

local function dissect_nack(tvb, tree)
    tree:add(f.conn, tvb(4, 4))
    tree:add(f.psn, tvb(8, 4))
    tree:add(f.cum_psn, tvb(12, 4))
    tree:add(f.ev, tvb(16, 2))
    tree:add(f.reason, tvb(18, 1))
    check_reserved(tree, tvb(19, 1))
    tree:add(f.ts_echo, tvb(20, 8))
    if tvb(18, 1):uint() < 1 or tvb(18, 1):uint() > 2 then malformed(tree, "unknown NACK reason") end
    tree:add_proto_expert_info(e_nack)
    local why = tvb(18, 1):uint() == 2 and "SEQUENCE" or "TRIMMED"
    return string.format("conn %d psn %d ev %d %s", tvb(4, 4):uint(), tvb(8, 4):uint(), tvb(16, 2):uint(), why)
end

local function dissect_probe(tvb, tree)
    tree:add(f.conn, tvb(4, 4))
    tree:add(f.ev, tvb(8, 2))
    check_reserved(tree, tvb(10, 2))
    tree:add(f.seq, tvb(12, 4))
    local warm = tvb(12, 4):uint() == WARM_SEQ
    tree:add(f.warm, warm):set_generated()
    tree:add(f.ts, tvb(16, 8))
    return string.format("conn %d ev %d seq %s", tvb(4, 4):uint(), tvb(8, 2):uint(),
                         warm and "warm-up" or tostring(tvb(12, 4):uint()))
end

function mrc.dissector(tvb, pinfo, tree)
    if tvb:len() < 4 or tvb(0, 1):uint() ~= 1 then return 0 end  -- not MRC v1: leave it to others
    local kind, flags = tvb(1, 1):uint(), tvb(2, 2):uint()
    pinfo.cols.protocol = "MRC"
    local subtree = tree:add(mrc, tvb(), "Multipath Reliable Connection, " .. (TYPES[kind] or "unknown type"))
    subtree:add(f.version, tvb(0, 1))
    subtree:add(f.type, tvb(1, 1))
    -- only the flags that are set are in the tree, so that a bare `mrc.flags.trimmed` filters trimmed packets
    local flags_item = subtree:add(f.flags, tvb(2, 2))
    local bit_fields = kind == DATA and {{TRIMMED, f.trimmed}, {LAST, f.last}, {RETX, f.retx}, {ECN, f.ecn_ce}}
        or kind == SACK and {{ECN, f.ecn_echo}, {DUP_ECHO, f.dup_echo}} or {}
    for _, pair in ipairs(bit_fields) do
        if bit32.btest(flags, pair[1]) then flags_item:add(pair[2], tvb(2, 2)) end
    end
    flags_item:append_text(flag_names(flags, kind))
    local name = TYPES[kind]
    if name == nil then
        malformed(subtree, "unknown packet type " .. kind)
        pinfo.cols.info = "MRC unknown type " .. kind
        return tvb:len()
    end
    if bit32.band(flags, bit32.bnot(ALLOWED_FLAGS[kind])) ~= 0 then
        malformed(subtree, string.format("unknown flags 0x%04x for %s", flags, name))
    end
    local need = LENGTHS[kind] or DATA_HEADER_LEN
    if tvb:reported_len() < need or (LENGTHS[kind] and tvb:reported_len() ~= need) then
        malformed(subtree, string.format("%s of %d bytes, expected %d", name, tvb:reported_len(), need))
        pinfo.cols.info = name .. " (malformed)"
        return tvb:len()
    end
    local text
    if kind == DATA then text = dissect_data(tvb, subtree, flags)
    elseif kind == SACK then text = dissect_sack(tvb, subtree)
    elseif kind == NACK then text = dissect_nack(tvb, subtree)
    else text = dissect_probe(tvb, subtree) end
    local path = usid_path()
    if path then add_path(subtree, path) end
    pinfo.cols.info = name .. " " .. text .. path_text(path) .. flag_names(flags, kind)
    return tvb:len()
end

local registered = nil

local function register()
    local port = mrc.prefs.udp_port
    if registered == port then return end
    local udp = DissectorTable.get("udp.port")
    if registered then udp:remove(registered, mrc) end
    udp:add(port, mrc)
    registered = port
end

function mrc.prefs_changed()
    register()
end

register()
