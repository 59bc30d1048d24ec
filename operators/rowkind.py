"""Flink's RowKind: the change kind carried by every changelog record."""
from __future__ import annotations

from enum import IntEnum


class RowKind(IntEnum):
    """Byte values follow Flink's ``RowKind.toByteValue()`` (0-3)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def is_accumulate(self) -> bool:
        return self is RowKind.INSERT or self is RowKind.UPDATE_AFTER

    @property
    def is_retract(self) -> bool:
        return not self.is_accumulate

    @classmethod
    def parse(cls, text: str | bytes | int) -> "RowKind":
        """Accept Flink's short strings (``+I``...), their names, or the byte values 0-3."""
        if isinstance(text, int):
            return cls(text)
        if isinstance(text, bytes):
            if len(text) == 1 and text[0] <= 3:
                return cls(text[0])
            text = text.decode("ascii")
        kind = _BY_TEXT.get(text.strip().upper())
        if kind is None:
            raise ValueError(f"unknown RowKind {text!r} (expected +I, -U, +U, -D or a byte 0-3)")
        return kind


_SHORT = {RowKind.INSERT: "+I", RowKind.UPDATE_BEFORE: "-U", RowKind.UPDATE_AFTER: "+U", RowKind.DELETE: "-D"}
_BY_TEXT = {**{v: k for k, v in _SHORT.items()}, **{k.name: k for k in RowKind}, **{str(int(k)): k for k in RowKind}}

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE

#: The kinds that add a row (``kind in ACCUMULATE``); the others retract one. A tuple, not the
#: property, because operators test it for every record.
ACCUMULATE = (INSERT, UPDATE_AFTER)
