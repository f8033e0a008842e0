"""Frozen records of one dataclass, kept column by column in typed arrays.

A long run makes one record per step and per EV state change (thousands a minute); as objects they cost
about 150 bytes each, as columns about 45, so the runner's memory stays flat enough over hours. Each field
is an ``int``, a ``float`` or a ``str`` (strings are stored once, by number).
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import fields
from typing import Any, Generic, TypeVar

R = TypeVar("R")

_CODES = {"int": "q", "float": "d", "str": "I"}


class Records(Generic[R]):
    def __init__(self, kind: type[R], items: Iterable[R] = ()):
        self.kind = kind
        self._names = [f.name for f in fields(kind)]  # type: ignore[arg-type]
        types = [str(f.type) for f in fields(kind)]  # type: ignore[arg-type]
        if unknown := [f"{n}: {t}" for n, t in zip(self._names, types, strict=True) if t not in _CODES]:
            raise TypeError(f"{kind.__name__} has fields Records cannot hold: {', '.join(unknown)}")
        self._text = [t == "str" for t in types]
        self._columns = [array(_CODES[t]) for t in types]
        self._strings: list[str] = []
        self._number: dict[str, int] = {}
        for item in items:
            self.append(item)

    def append(self, record: R) -> None:
        for name, text, column in zip(self._names, self._text, self._columns, strict=True):
            value = getattr(record, name)
            if text:
                number = self._number.get(value)
                if number is None:
                    number = self._number[value] = len(self._strings)
                    self._strings.append(value)
                value = number
            column.append(value)

    def column(self, name: str) -> list[Any]:
        """One field of every record, in order."""
        index = self._names.index(name)
        values = self._columns[index]
        return [self._strings[v] for v in values] if self._text[index] else values.tolist()

    def __len__(self) -> int:
        return len(self._columns[0]) if self._columns else 0

    def __getitem__(self, i: int) -> R:
        return self.kind(*(self._strings[c[i]] if text else c[i]
                           for text, c in zip(self._text, self._columns, strict=True)))

    def __iter__(self) -> Iterator[R]:
        return (self[i] for i in range(len(self)))
