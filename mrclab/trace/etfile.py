"""One Chakra ET file on disk: length-delimited protobuf messages (a varint byte count, then the message), a
`GlobalMetadata` first and a `Node` in every later one.

Reading is bounded and strict about the framing (a truncated file is an error naming the last node read and the
byte where it broke) and lenient about content: fields this schema does not declare stay in the messages as
unknown fields and are ignored. Nodes come out as `RawNode`s, the few fields a replay needs with their attributes
by name; `graph` checks what they mean.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError, Message

from . import et_def_pb2 as pb

MAX_FILE_BYTES = 256 << 20
MAX_MESSAGE_BYTES = 64 << 20


class TraceError(Exception):
    """A trace that cannot be replayed: the message is one line naming the file, the node and the field."""


@dataclass(frozen=True)
class RawNode:
    """A Node as read: its type by the schema's name (or ``"<n>"`` for a number the schema lacks), its
    dependencies, duration and attributes (name -> Python value)."""

    id: int
    name: str
    type: str
    data_deps: tuple[int, ...]
    ctrl_deps: tuple[int, ...]
    duration_micros: int
    attrs: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class EtFile:
    path: str
    version: str
    metadata: dict = field(hash=False, compare=False)
    nodes: tuple[RawNode, ...]


def attr_value(a: pb.AttributeProto):
    """The Python value of an attribute, whatever member of the oneof holds it (lists as tuples)."""
    which = a.WhichOneof("value")
    if which is None:
        return None
    value = getattr(a, which)
    return tuple(value.values) if which.endswith("_list") else value


def _varint(data: bytes, at: int) -> tuple[int, int] | None:
    """(value, next offset), or None when the data ends inside the varint."""
    value = shift = 0
    while at < len(data):
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            return None
    return None


def messages(data: bytes, path: str) -> Iterator[tuple[int, bytes]]:
    """(byte offset, payload) of each length-delimited message; TraceError where the framing breaks."""
    at = 0
    while at < len(data):
        read = _varint(data, at)
        if read is None:
            raise _truncated(path, at, "its length prefix is cut short")
        length, start = read
        if length > MAX_MESSAGE_BYTES:
            raise TraceError(f"{path}: byte {at}: a message of {length} bytes announced (at most "
                             f"{MAX_MESSAGE_BYTES}): not a Chakra ET file, or a corrupt one")
        if start + length > len(data):
            raise _truncated(path, at, f"{length} bytes announced, {len(data) - start} left")
        yield at, data[start:start + length]
        at = start + length


class _Truncated(TraceError):
    pass


def _truncated(path: str, at: int, why: str) -> TraceError:
    return _Truncated(f"{path}: byte {at}: truncated file: {why}")


def read(path: Path) -> EtFile:
    """The file's metadata and nodes; TraceError (one line) on anything that is not a readable ET file."""
    name = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TraceError(f"{name}: {size} bytes, more than {MAX_FILE_BYTES} (one rank's trace)")
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if not data:
        raise TraceError(f"{name}: empty: an ET file starts with its GlobalMetadata message")
    frames = messages(data, name)
    meta = pb.GlobalMetadata()
    last_id: int | None = None
    try:
        _, first = next(frames)
        meta.ParseFromString(first)
        nodes = []
        for at, payload in frames:
            node = pb.Node()
            try:
                node.ParseFromString(payload)
            except DecodeError as exc:
                after = "the metadata" if last_id is None else f"node {last_id}"
                raise TraceError(f"{name}: byte {at} (the node after {after}): not a Node message: {exc}") from None
            nodes.append(_raw(node))
            last_id = node.id
    except _Truncated as exc:
        where = "in the metadata" if last_id is None else f"after node {last_id}"
        raise TraceError(f"{exc} ({where})") from None
    except DecodeError as exc:
        raise TraceError(f"{name}: byte 0: the first message is not a GlobalMetadata: {exc}") from None
    return EtFile(name, meta.version, {a.name: attr_value(a) for a in meta.attr}, tuple(nodes))


def _raw(node: pb.Node) -> RawNode:
    kind = pb.NodeType.Name(node.type) if node.type in pb.NodeType.values() else str(node.type)
    return RawNode(node.id, node.name, kind, tuple(node.data_deps), tuple(node.ctrl_deps), node.duration_micros,
                   {a.name: attr_value(a) for a in node.attr})


# -- writing ---------------------------------------------------------------------------------------------------

def _prefix(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def attribute(name: str, value) -> pb.AttributeProto:
    """An attribute as Chakra's converter writes it: ints as int64, strings, bools, lists of bools or ints."""
    a = pb.AttributeProto(name=name)
    if isinstance(value, bool):
        a.bool_val = value
    elif isinstance(value, int):
        a.int64_val = value
    elif isinstance(value, float):
        a.double_val = value
    elif isinstance(value, str):
        a.string_val = value
    elif isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value):
        a.bool_list.values.extend(value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        a.int64_list.values.extend(value)
    else:
        raise ValueError(f"attribute {name}: cannot write {value!r}")
    return a


def encode(version: str, metadata: dict, nodes: Iterable[pb.Node]) -> bytes:
    """A whole ET file: the metadata message, then each node, each behind its varint length."""
    meta = pb.GlobalMetadata(version=version, attr=[attribute(k, v) for k, v in metadata.items()])
    out = bytearray()
    ordered: list[Message] = [meta, *nodes]
    for message in ordered:
        payload = message.SerializeToString()
        out += _prefix(len(payload)) + payload
    return bytes(out)
