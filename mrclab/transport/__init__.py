"""The MRC transport as a pure, sans-IO state machine (no sockets, no clocks, no threads).

``Connection`` is what an agent drives; ``wire`` is the packet format; ``sim`` a seeded
discrete-event network to test and benchmark it in-process.
"""
from .config import TransportConfig
from .connection import Connection
from .counters import Counters
from .ev import EvState, EvStateChanged
from .events import MessageCompleted, MessageDelivered, MessageFailed, NicStateChanged
from .wire import MRC_UDP_PORT, WireError

__all__ = ["Connection", "Counters", "EvState", "EvStateChanged", "MRC_UDP_PORT", "MessageCompleted",
           "MessageDelivered", "MessageFailed", "NicStateChanged", "TransportConfig", "WireError"]
