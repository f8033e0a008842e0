"""The shipped Wireshark dissector for MRC (`mrc.lua`): every packet of `transport/wire.py` and the uSID path."""
from pathlib import Path

DISSECTOR = Path(__file__).resolve().parent / "mrc.lua"
PERSONAL_PLUGINS = "~/.local/lib/wireshark/plugins"
