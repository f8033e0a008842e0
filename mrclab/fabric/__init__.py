"""The emulated fabric of one run.

hostconf  a host's IPv6 stack (fabric addresses only), as shell commands
net       `Fabric`: builds hosts, switches, cables, shaping and controller; tears them down
egress    HTB shaping and the eBPF trimmer / fault injector on every port
faults    link and switch faults, per-direction link counters
verify    probes every (src, dst, plane, spine) path and proves which spine carried it
ovs       the batched ovs-vsctl / ovs-ofctl / iproute2 calls
shells    one script on each of many Mininet nodes at once
"""
