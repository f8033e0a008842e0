"""Chakra execution traces: the files (`etfile`, the schema `et_def.proto` and its generated `et_def_pb2`), the
job they describe as one graph over every rank (`graph`), and small traces written from a description (`make`)."""
from .etfile import TraceError
from .graph import Op, Trace, load

__all__ = ["Op", "Trace", "TraceError", "load"]
