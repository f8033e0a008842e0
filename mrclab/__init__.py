"""mrclab: emulate MRC (Multipath Reliable Connection) on a multi-plane Clos fabric of Linux SRv6 routers or
Open vSwitch bridges, or simulate it."""
from . import build  # noqa: F401  (decides the transport's build before anything imports it)

__version__ = "0.1.0"
