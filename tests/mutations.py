"""Mutations of the shipped spec files, for the loader's fuzz test and benchmarks/fuzz_spec.py.

A mutation is reproducible from (file, seed). It either edits the parsed data (a value replaced by
a hostile one, a key dropped or invented) and writes it back, or edits the text itself (bytes
flipped, lines duplicated or cut, an alias bomb or deep nesting spliced in).
"""
from __future__ import annotations

import copy
import random
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "scenarios").glob("*.yaml")) + sorted((REPO / "topologies").glob("*.yaml"))

HOSTILE = [10 ** 400, -1, 0, 1, 2 ** 63, 2 ** 64, float("nan"), float("inf"), -float("inf"), 1e308, 0.0001,
           "", " ", "h00", "h\u0660", "h1", "p0l00-p0s1", "p0l0-p0s1", "../../x", "/dev/zero", "/" + "x" * 5000,
           "x" * 20000, [], {}, [[[[[]]]]], None, True, False, "1e999MiB", "9" * 400 + "s", "\x00", "abc",
           "-5ms", "0bit", "1Kbit", "10ms", "999999s", "1GiB", {"a": 1}, list(range(50)), "all", "clos-2p-2l-2s",
           "flap", "rate", "loss", "incast", "tcp", "mrc", "ecmp-reconverge"]
BOMB = "bomb: &a [x,x,x,x,x,x,x,x]\n" + "".join(
    f"b{i}: &a{i} [*{'a' if i == 0 else f'a{i - 1}'}, *{'a' if i == 0 else f'a{i - 1}'}, "
    f"*{'a' if i == 0 else f'a{i - 1}'}, *{'a' if i == 0 else f'a{i - 1}'}]\n" for i in range(12))


def _hostile(rng: random.Random):
    return copy.deepcopy(rng.choice(HOSTILE))  # the pool's lists and mappings are never shared


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _mutate_data(data, rng: random.Random):
    paths = [p for p in _paths(data) if p]
    if not paths:
        return _hostile(rng)
    path = rng.choice(paths)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    op = rng.randrange(4)
    if op == 0 and isinstance(parent, dict):
        del parent[path[-1]]
    elif op == 1 and isinstance(parent, dict):
        parent[rng.choice(["bogus", "seed", "events", "transport_options", "hold_window", "until", 7])] = \
            _hostile(rng)
    else:
        parent[path[-1]] = _hostile(rng)
    return data


def _mutate_text(text: str, rng: random.Random) -> str | bytes:
    op = rng.randrange(6)
    lines = text.splitlines(keepends=True)
    if op == 0:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    if op == 1:
        i = rng.randrange(len(lines))
        return "".join(lines[:i] + [lines[i]] + lines[i:])  # a duplicated line: often a duplicate key
    if op == 2:
        return text[:rng.randrange(len(text))]
    if op == 3:
        return text + BOMB
    if op == 4:
        depth = rng.choice([20, 200, 5000])
        return text + "deep: " + "[" * depth + "]" * depth + "\n"
    i = rng.randrange(len(text))
    return text[:i] + rng.choice([":", "-", "&a", "*a", "{", "[", "'", '"', "\t", "!!python/object:os.system"]) \
        + text[i:]


def mutate(path: Path, seed: int) -> str | bytes:
    """The mutation `seed` of shipped file `path`: text or bytes to write to a file."""
    rng = random.Random(seed)
    text = path.read_text()
    if rng.random() < 0.6:
        data = yaml.safe_load(text)
        for _ in range(rng.randint(1, 3)):
            data = _mutate_data(data, rng)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return _mutate_text(text, rng)


def kind(path: Path) -> str:
    return "scenario" if path.parent.name == "scenarios" else "topology"
