"""The emulated fabric: Mininet topology, OVS switches, tc shaping, eBPF egress, faults, cleanup."""
