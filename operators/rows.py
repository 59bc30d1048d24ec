"""Building output rows: left ++ right, null padding, and the optional projection."""
from __future__ import annotations

from typing import Callable, Sequence

RowBuilder = Callable[[tuple, tuple], tuple]


def row_builder(projection: Sequence[tuple[int, int]] | None, right: bool = True) -> RowBuilder:
    """``build(left_row, right_row) -> output row``; ``right=False`` for SEMI/ANTI (left row only)."""
    if projection is None:
        if right:
            return lambda left_row, right_row: left_row + right_row
        return lambda left_row, right_row: left_row
    items = ", ".join(f"{'L' if side == 0 else 'R'}[{index}]" for side, index in projection)
    return eval(f"lambda L, R: ({items},)")  # noqa: S307 - generated from integer indexes only


def nulls(width: int) -> tuple:
    return (None,) * width


_NAN = ("NaN",)  # stands for a NaN value in a row's identity; no column of a float type holds a tuple


def identity(row: tuple) -> tuple:
    """The row as a key under which equal rows meet. Python's NaN is not equal to itself, so a
    stored row holding one could never be found again by its retraction; Flink compares rows by
    their binary form, where a NaN equals a NaN. Rows without NaN are their own identity."""
    for value in row:
        if value != value:
            return tuple(_NAN if v != v else v for v in row)
    return row
