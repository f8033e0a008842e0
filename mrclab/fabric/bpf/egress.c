// SPDX-License-Identifier: GPL-2.0
// Switch-port egress for mrclab: a virtual queue draining at the port rate, MRC packet
// trimming when it would overflow, ECN marking as it fills, and loss / blackhole faults;
// and the patch that joins the two halves of a host cable (`patch`, at the end). One program serves every
// port of a run; the port id arrives in skb->tc_classid, which cls_bpf sets to the minor
// of the filter's `classid` before running the program. Python (mrclab/fabric/egress.py)
// writes `cfg` and reads `stats`; the layouts of the structs below are mirrored there.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_PORTS 4096
#define MRC_UDP_PORT 4793
#define MRC_VERSION 1
#define MRC_DATA 1
#define MRC_TRIMMED 0x0001
#define MRC_DATA_HEADER_LEN 48
#define L4_OFF (ETH_HLEN + sizeof(struct ipv6hdr))
#define MRC_OFF (L4_OFF + sizeof(struct udphdr))
#define TRIMMED_LEN (MRC_OFF + MRC_DATA_HEADER_LEN)
#define CSUM_OFF (L4_OFF + offsetof(struct udphdr, check))
#define TCP_CSUM_OFF (L4_OFF + offsetof(struct tcphdr, check))
#define USID_BLOCK 0xfcbb  // the first 16 bits of every uSID carrier (fcbb:<plane>::/32 blocks)
#define USID_WORDS 6       // 16-bit uSIDs after the 32-bit block
#define CSUM_CARRIER 0     // port_cfg.csum_mode
#define CSUM_FINAL 1
#define CSUM_MAKE_FINAL 2
#define NSEC_PER_SEC 1000000000ULL
#define PRIO_HIGH 0x10010  // HTB class 1:10, strict priority: MRC headers and control
#define PRIO_BULK 0x10020     // HTB class 1:20
// How the port's HTB shapes (egress.py's _HTB_TRIMMED_SHARE and NIC_BURST): every class may send
// HTB_BURST bytes ahead of its rate after idling, and class 1:10 is guaranteed 1/CTL_SHARE of the
// port's rate: within that, a high-priority packet goes at once, whatever bulk waits.
#define CTL_SHARE 10
#define HTB_BURST 1600
// Dropped packets are consumed with success reported to the sender, as on a wire. TC_ACT_SHOT
// would fail the send: OVS's userspace datapath then discards the rest of its sendmmsg()
// batch or resends the packet, and a local TCP sender stalls until a timer.
#define DROP_SILENTLY TC_ACT_STOLEN
// ECN: the low two bits of the IPv6 traffic class, bits 5..4 of the header's second byte.
#define ECN_SHIFT 4
#define ECN_MASK 3
#define ECN_NOT_ECT 0
#define ECN_CE 3

struct port_cfg {
	__u64 rate_bytes_per_s;  // drain rate of the virtual queue
	__u64 loss_threshold;    // drop when bpf_get_prandom_u32() < this (p * 2^32)
	__u32 queue_bytes;
	__u8 trim;
	__u8 blackhole;
	__u16 mtu;  // the largest frame, which a high-priority packet may find in transmission
	__u8 cut;   // the cable is down: count what is sent into it, and drop it
	// CSUM_*: whether L4 checksums are over the carrier address (OVS rewrites them at every
	// hop) or over the final destination, the host a uSID carrier ends at (a kernel End shift
	// leaves them alone). A host NIC then turns its host's checksums into final ones.
	__u8 csum_mode;
	__u8 ecn;        // mark CE on ECT packets, with probability rising from 0 at ecn_min to 1 at ecn_max
	__u8 pad;
	__u32 ecn_min;   // bytes of the virtual queue ahead of the packet
	__u32 ecn_max;
};

struct port_queue {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 backlog;  // bytes: the modelled buffer, what trimming, drops and ECN go by
	__u64 last_ns;
	// What the packets wait, as HTB makes them: the bytes the port's shaper owes (its tokens, negated:
	// down to -HTB_BURST after idling), and the bytes class 1:10 may still send at its guaranteed rate.
	__s64 debt;
	__s64 ctl_tokens;
};

struct port_stats {
	__u64 tx_packets, tx_bytes, drops, trims, loss_drops, blackhole_drops, queued_ns, ctl_packets, ctl_queued_ns,
		cut_drops, ecn_marked;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_queue);
} queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_stats);
} stats SEC(".maps");

enum verdict { PASS, TRIM, DROP };

enum kind { OTHER, DATA, CONTROL };

// What an MRC switch tells apart: DATA with payload behind its header (trimmable), and the
// packets that travel in the high-priority class at every hop: SACK, NACK, probes and DATA
// already trimmed upstream (OVS's userspace datapath hands each hop a fresh skb, so the
// priority has to be read from the packet itself, as a real switch reads DSCP).
static __always_inline enum kind mrc_kind(struct __sk_buff *skb)
{
	struct {
		struct ethhdr eth;
		struct ipv6hdr ip6;
		struct udphdr udp;
		__u8 version, type;
		__be16 flags;
	} __attribute__((packed)) h;

	if (bpf_skb_load_bytes(skb, 0, &h, sizeof(h)))
		return OTHER;
	// The Ethernet header, not skb->protocol: a raw AF_PACKET sender (OVS) may leave that 0.
	if (h.eth.h_proto != bpf_htons(ETH_P_IPV6) || h.ip6.nexthdr != IPPROTO_UDP || h.udp.dest != bpf_htons(MRC_UDP_PORT) ||
	    h.version != MRC_VERSION)
		return OTHER;
	if (h.type != MRC_DATA || (h.flags & bpf_htons(MRC_TRIMMED)))
		return CONTROL;
	return skb->len > TRIMMED_LEN ? DATA : OTHER;
}

// The address a uSID carrier ends at: its block and its last uSID (fcbb:0:1000:2001:1003:4007::
// -> fcbb:0:4007::), which every End shift on the way brings forward. Returns 1 if it differs.
static __always_inline int final_daddr(struct in6_addr *a)
{
	int last = -1;

	if (a->s6_addr16[0] != bpf_htons(USID_BLOCK))
		return 0;
#pragma unroll
	for (int i = 0; i < USID_WORDS; i++)
		if (a->s6_addr16[2 + i])
			last = i;
	if (last <= 0)
		return 0;
	a->s6_addr16[2] = a->s6_addr16[2 + last];
#pragma unroll
	for (int i = 1; i < USID_WORDS; i++)
		a->s6_addr16[2 + i] = 0;
	return 1;
}

// A host's own UDP or TCP segment to a uSID carrier: make its checksum the one the final
// destination verifies (the pseudo-header's destination replaced by the final address).
static __always_inline void checksum_to_final(struct __sk_buff *skb)
{
	struct {
		struct ethhdr eth;
		struct ipv6hdr ip6;
	} __attribute__((packed)) h;
	struct in6_addr carrier, final;
	__u32 off, flags = BPF_F_PSEUDO_HDR;
	__s64 diff;

	if (bpf_skb_load_bytes(skb, 0, &h, sizeof(h)) || h.eth.h_proto != bpf_htons(ETH_P_IPV6))
		return;
	if (h.ip6.nexthdr == IPPROTO_UDP) {
		off = CSUM_OFF;
		flags |= BPF_F_MARK_MANGLED_0;  // a zero UDP checksum means none, and stays so
	} else if (h.ip6.nexthdr == IPPROTO_TCP) {
		off = TCP_CSUM_OFF;
	} else {
		return;  // e.g. an SRH (TCP baseline): its checksum covers the final segment already
	}
	carrier = final = h.ip6.daddr;
	if (!final_daddr(&final))
		return;
	diff = bpf_csum_diff((__be32 *)&carrier, sizeof(final), (__be32 *)&final, sizeof(final), 0);
	if (diff >= 0)
		bpf_l4_csum_replace(skb, off, 0, diff, flags);
}

// Cut to the MRC header, set TRIMMED, fix both lengths and the UDP checksum. The checksum
// is recomputed over the short packet and applied as a non-pseudo-header diff, which the
// kernel applies only when the checksum is complete (CHECKSUM_NONE); a CHECKSUM_PARTIAL
// packet (a local sender with TX offload) only needs the pseudo-header length update.
static __always_inline int trim(struct __sk_buff *skb, int csum_final)
{
	struct {
		struct in6_addr saddr, daddr;
		__be32 len, nexthdr;
		struct udphdr udp;
		__u8 mrc[MRC_DATA_HEADER_LEN];
	} c;  // the IPv6 pseudo-header, then the datagram as it will leave
	__be16 old_len, new_len = bpf_htons(sizeof(struct udphdr) + MRC_DATA_HEADER_LEN);
	__be16 old_check;
	__s64 sum;

	if (bpf_skb_load_bytes(skb, L4_OFF + offsetof(struct udphdr, len), &old_len, sizeof(old_len)))
		return -1;
	if (bpf_skb_change_tail(skb, TRIMMED_LEN, 0))
		return -1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, saddr), &c.saddr, 32) ||
	    bpf_skb_load_bytes(skb, L4_OFF, &c.udp, sizeof(c.udp) + MRC_DATA_HEADER_LEN))
		return -1;
	if (csum_final)
		final_daddr(&c.daddr);
	c.mrc[3] |= MRC_TRIMMED;  // flags are big-endian: the low byte is byte 3
	c.udp.len = new_len;
	if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, payload_len), &new_len, 2, 0) ||
	    bpf_skb_store_bytes(skb, L4_OFF + offsetof(struct udphdr, len), &new_len, 2, 0) ||
	    bpf_skb_store_bytes(skb, MRC_OFF + 3, &c.mrc[3], 1, 0))
		return -1;
	if (bpf_l4_csum_replace(skb, CSUM_OFF, old_len, new_len, BPF_F_PSEUDO_HDR | 2))
		return -1;
	if (bpf_skb_load_bytes(skb, CSUM_OFF, &old_check, 2))
		return -1;
	c.len = bpf_htonl(sizeof(struct udphdr) + MRC_DATA_HEADER_LEN);
	c.nexthdr = bpf_htonl(IPPROTO_UDP);
	c.udp.check = 0;
	sum = bpf_csum_diff(0, 0, (__be32 *)&c, sizeof(c), 0);
	if (sum < 0)
		return -1;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);  // folded sum; the checksum is its complement
	// diff turning old_check into ~sum: csum_fold(diff + ~old_check) == ~sum
	return bpf_l4_csum_replace(skb, CSUM_OFF, 0, (__u32)(__u16)old_check + (__u16)sum,
				   BPF_F_MARK_MANGLED_0);
}

// Set CE on an ECT packet that waits behind `ahead` queued bytes, with probability
// (ahead - ecn_min) / (ecn_max - ecn_min), clipped to [0, 1]. Returns 1 if it marked.
static __always_inline int mark_ce(struct __sk_buff *skb, struct port_cfg *c, __u64 ahead)
{
	struct {
		struct ethhdr eth;
		__u8 version_tc, tc_flow;
	} __attribute__((packed)) h;
	__u8 ecn;

	if (ahead <= c->ecn_min || bpf_skb_load_bytes(skb, 0, &h, sizeof(h)) || h.eth.h_proto != bpf_htons(ETH_P_IPV6))
		return 0;
	ecn = (h.tc_flow >> ECN_SHIFT) & ECN_MASK;
	if (ecn == ECN_NOT_ECT || ecn == ECN_CE)
		return 0;
	// random < p * 2^32, without a division: both products fit in 64 bits (ahead < ecn_max < 2^32)
	if (ahead < c->ecn_max &&
	    (__u64)bpf_get_prandom_u32() * (c->ecn_max - c->ecn_min) >= (ahead - c->ecn_min) << 32)
		return 0;
	h.tc_flow |= ECN_CE << ECN_SHIFT;  // no checksum covers the traffic class
	return bpf_skb_store_bytes(skb, ETH_HLEN + 1, &h.tc_flow, 1, 0) == 0;
}

SEC("tc")
int egress(struct __sk_buff *skb)
{
	// A TCP sender hands over GSO super-packets, segmented only after the qdisc: count their
	// segments and their wire length (the bytes HTB charges), not the skb.
	__u32 port = skb->tc_classid, len = skb->wire_len, segs = skb->gso_segs ?: 1;
	struct port_cfg *c = bpf_map_lookup_elem(&cfg, &port);
	struct port_queue *q = bpf_map_lookup_elem(&queue, &port);
	struct port_stats *s = bpf_map_lookup_elem(&stats, &port);
	enum verdict v = DROP;
	enum kind k;
	__u64 now, elapsed, drained, own, ahead = 0, wait = 0;  // bytes: queued ahead; to wait for, at the rate
	__s64 debt, tokens;

	if (!c || !q || !s || !c->rate_bytes_per_s || skb->priority == PRIO_HIGH)
		return TC_ACT_OK;  // not a configured port, or a packet this program trimmed already
	if (c->cut) {
		s->cut_drops += segs;
		return DROP_SILENTLY;
	}
	if (c->csum_mode == CSUM_MAKE_FINAL)
		checksum_to_final(skb);
	if (c->blackhole) {
		s->blackhole_drops += segs;
		return DROP_SILENTLY;
	}
	if (c->loss_threshold && bpf_get_prandom_u32() < c->loss_threshold) {
		s->loss_drops += segs;
		return DROP_SILENTLY;
	}
	k = mrc_kind(skb);
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&q->lock);
	elapsed = now > q->last_ns ? now - q->last_ns : 0;
	if (elapsed > NSEC_PER_SEC)
		elapsed = NSEC_PER_SEC;  // bounds the product; a queue drains in under a second
	drained = elapsed * c->rate_bytes_per_s / NSEC_PER_SEC;
	q->backlog = drained >= q->backlog ? 0 : q->backlog - drained;
	debt = q->debt - (__s64)drained;
	q->debt = debt > -HTB_BURST ? debt : -HTB_BURST;
	tokens = q->ctl_tokens + (__s64)(drained / CTL_SHARE);
	q->ctl_tokens = tokens < HTB_BURST ? tokens : HTB_BURST;
	if (now > q->last_ns)
		q->last_ns = now;
	if (k == CONTROL) {
		if (q->backlog + len <= 2ULL * c->queue_bytes) {  // the header queue (below)
			// Within its class's rate it goes at once. Past it, HTB lets it borrow the port's rate, so
			// it waits for the frame being sent (what the shaper owes, one frame at most), or for its
			// class's own tokens if those come sooner; it is charged to its class only when sent on those.
			if (q->ctl_tokens < 0) {
				wait = q->debt <= 0 ? 0 : q->debt < c->mtu ? q->debt : c->mtu;
				own = (__u64)(-q->ctl_tokens) * CTL_SHARE;
				if (own < wait) {
					wait = own;
					q->ctl_tokens -= len;
				}
			} else {
				q->ctl_tokens -= len;
			}
			q->backlog += len;
			q->debt += len;
			v = PASS;
		}
	} else if (q->backlog == 0 || q->backlog + len <= c->queue_bytes) {
		ahead = q->backlog;  // what it waits behind
		wait = q->debt > 0 ? q->debt : 0;  // less the burst HTB banked while the port idled
		q->backlog += len;
		q->debt += len;
		v = PASS;
	} else if (k == DATA && c->trim && q->backlog + TRIMMED_LEN <= 2ULL * c->queue_bytes) {
		q->backlog += TRIMMED_LEN;  // headers get a second queue's worth, then drop too
		q->debt += TRIMMED_LEN;
		if (q->ctl_tokens >= 0)
			q->ctl_tokens -= TRIMMED_LEN;  // it leaves in class 1:10
		v = TRIM;
	}
	bpf_spin_unlock(&q->lock);

	if (v == TRIM && trim(skb, c->csum_mode != CSUM_CARRIER) == 0) {
		s->trims++;
		s->tx_packets++;
		s->tx_bytes += TRIMMED_LEN;
		// The qdisc layer took the packet's length before this hook ran; sending it round
		// again makes HTB charge the trimmed size, not the original.
		skb->priority = PRIO_HIGH;
		return bpf_redirect(skb->ifindex, 0);
	}
	if (v != PASS) {
		s->drops += segs;
		return DROP_SILENTLY;
	}
	s->tx_packets += segs;
	s->tx_bytes += len;
	// How long the packet waits in the port's shaper (above): the emulated network's own queueing,
	// which the run sets against the RTTs the agents measure to tell the network's delay from the
	// emulator's.
	if (k == CONTROL) {
		skb->priority = PRIO_HIGH;
		s->ctl_packets++;
		s->ctl_queued_ns += wait * NSEC_PER_SEC / c->rate_bytes_per_s;
	} else {
		skb->priority = PRIO_BULK;
		s->queued_ns += segs * (wait * NSEC_PER_SEC / c->rate_bytes_per_s);
		// Only the bulk queue marks: high-priority packets wait for one frame at most.
		if (c->ecn && mark_ce(skb, c, ahead))
			s->ecn_marked += segs;
	}
	return TC_ACT_OK;
}

// A host cable's patch (mrclab/fabric/cables.py): on each of its two ends, at tc ingress, whatever
// arrives goes straight into the ingress of the other end's peer (in that peer's own namespace).
// The other end's interface index arrives as the filter's classid minor.
SEC("tc")
int patch(struct __sk_buff *skb)
{
	return bpf_redirect_peer(skb->tc_classid, 0);
}

char LICENSE[] SEC("license") = "GPL";
