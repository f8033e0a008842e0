"""Flow hashing for the single-path baselines: one path per flow, picked the way an ECMP switch would.

RoCE RC (``--transport single-path``) and a bonded host's TCP (``--transport tcp``) each
pin a flow to one (plane, spine) path by a hash of the flow's identity. The hash is
stable across processes and Python versions (unlike ``hash()`` of a string), so both
ends and every rerun of a seed pick the same path.
"""
from __future__ import annotations

import hashlib
import struct


def flow_hash(*fields: int) -> int:
    """A stable 64-bit hash of non-negative integers."""
    packed = struct.pack(f">{len(fields)}Q", *fields)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "big")
