"""mrclab: emulate MRC (Multipath Reliable Connection) on a multi-plane Clos of Open vSwitch switches."""
__version__ = "0.1.0"
