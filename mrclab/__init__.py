"""mrclab: emulate MRC (Multipath Reliable Connection) on a multi-plane Clos fabric of Linux SRv6 routers or
Open vSwitch bridges, or simulate it."""
from . import build  # noqa: F401  (decides the transport's build before anything imports it)

__version__ = "0.1.0"
__all__ = ["Run", "Sweep", "UsageError", "load", "run", "scenario", "sweep"]


def __getattr__(name: str):
    """`mrclab.run`, `mrclab.load`, ... (mrclab.api), imported when first used: `import mrclab` stays light for the
    agents and the command line, which never use them."""
    if name == "UsageError":
        from .errors import UsageError
        return UsageError
    if name in __all__:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'mrclab' has no attribute {name!r}")
