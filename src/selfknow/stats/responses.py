"""Sparse examinee x item 0/1 response matrices: only the answered cells are stored.

Leaderboard matrices are thousands of models by tens of thousands of items, mostly missing.
:class:`Responses` keeps the answered cells row by row (CSR layout: ``indptr``, ``col``, and
the response as a bool), 5 bytes a cell, so memory grows with the answers, not with the
matrix. Every Rasch computation reduces per-cell values to per-row or per-column sums; they
walk the cells in blocks of :data:`BLOCK_CELLS` (row-aligned) with :func:`sum_cells`, so the
temporaries stay small whatever the size of the matrix.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterator, Literal, Sequence

import numpy as np

# Cells per block: large enough that numpy's per-call overhead (a few microseconds) is small,
# small enough that a block's float64 temporaries (512 KiB each) stay in the CPU cache; on a
# 5,000 x 30,000 fit 2^16 was faster than 2^17 and 2^20.
BLOCK_CELLS = 1 << 16


def as_response_matrix(X, name: str = "response matrix") -> np.ndarray:
    """`X` as a 2-D float array of 0/1 with NaN for missing; raises naming the first bad cell."""
    A = np.asarray(X, dtype=float)
    if A.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D examinees x items array, got shape {A.shape}")
    bad = (A != 0) & (A != 1) & ~np.isnan(A)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"{name}: row {i}, column {j} holds {float(A[i, j])!r}; responses must be 0, 1 or NaN")
    return A


@dataclass(frozen=True)
class Block:
    """Rows ``r0:r1`` of a :class:`Responses`: their cells' columns (as intp) and responses,
    and how many cells each row has."""

    r0: int
    r1: int
    counts: np.ndarray
    col: np.ndarray
    x: np.ndarray

    def per_row(self, v: np.ndarray) -> np.ndarray:
        """A per-row vector (one entry per row of the whole matrix) spread onto the cells."""
        return np.repeat(v[self.r0:self.r1], self.counts)

    def per_col(self, v: np.ndarray) -> np.ndarray:
        """A per-column vector spread onto the cells."""
        return v[self.col]

    def row_sums(self, v: np.ndarray) -> np.ndarray:
        """Per-cell values summed over each row of the block (0 for a row without cells)."""
        out = np.zeros(self.r1 - self.r0, dtype=v.dtype)
        nonempty = self.counts > 0
        if nonempty.any():
            # the cells are in row order, so a row is a contiguous segment
            starts = np.cumsum(self.counts) - self.counts
            out[nonempty] = np.add.reduceat(v, starts[nonempty])
        return out


@dataclass(frozen=True)
class Responses:
    """The answered cells of an examinees x items 0/1 matrix. Row i's cells are
    ``indptr[i]:indptr[i+1]``, with columns ``col`` (increasing within a row) and
    responses ``x``."""

    shape: tuple[int, int]
    indptr: np.ndarray
    col: np.ndarray
    x: np.ndarray

    def __post_init__(self):
        if self.indptr.shape != (self.shape[0] + 1,) or self.col.shape != self.x.shape or self.indptr[-1] != self.col.size:
            raise ValueError(f"inconsistent sparse response matrix of shape {self.shape}")

    @classmethod
    def from_dense(cls, X, name: str = "response matrix") -> "Responses":
        """From a 2-D array of 0/1 with NaN for missing (validated, see :func:`as_response_matrix`)."""
        A = as_response_matrix(X, name)
        rows, cols = np.nonzero(~np.isnan(A))
        return cls.from_cells(A.shape, rows, cols, A[rows, cols] == 1.0)

    @classmethod
    def from_cells(cls, shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, x: np.ndarray) -> "Responses":
        """From cell coordinates in row-major order (as ``np.nonzero`` gives them)."""
        counts = np.bincount(rows, minlength=shape[0])
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls((int(shape[0]), int(shape[1])), indptr, np.asarray(cols, dtype=np.int32),
                   np.asarray(x, dtype=bool))

    @classmethod
    def stack(cls, parts: Sequence["Responses"]) -> "Responses":
        """The rows of `parts` one after the other (all with the same number of columns)."""
        widths = {p.shape[1] for p in parts}
        if len(widths) != 1:
            raise ValueError(f"cannot stack response blocks of {sorted(widths)} columns")
        offsets = np.cumsum([0] + [p.col.size for p in parts])
        indptr = np.concatenate([[0]] + [p.indptr[1:] + off for p, off in zip(parts, offsets)])
        return cls((sum(p.shape[0] for p in parts), widths.pop()), indptr.astype(np.int64),
                   np.concatenate([p.col for p in parts]), np.concatenate([p.x for p in parts]))

    @property
    def n_cells(self) -> int:
        return int(self.col.size)

    @property
    def missing_fraction(self) -> float:
        n, L = self.shape
        return 1.0 - self.n_cells / (n * L) if n * L else 0.0

    @cached_property
    def row_counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    @cached_property
    def margins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(answered, correct) per row, then per column, as floats: one pass over the cells."""
        (row_n, row_s), (col_n, col_s) = sum_cells(
            self, lambda blk: [np.ones(blk.x.size), blk.x.astype(float)], "both")
        return row_n, row_s, col_n, col_s

    @property
    def row_scores(self) -> np.ndarray:
        """Number correct per row."""
        return self.margins[1]

    @property
    def col_counts(self) -> np.ndarray:
        """Number answered per column."""
        return self.margins[2]

    @property
    def col_scores(self) -> np.ndarray:
        """Number correct per column."""
        return self.margins[3]

    def take(self, rows: np.ndarray, cols: np.ndarray) -> "Responses":
        """The submatrix of the rows and columns selected by two boolean masks."""
        if rows.all() and cols.all():
            return self
        new_col = (np.cumsum(cols) - 1).astype(np.int32)
        counts = np.zeros(self.shape[0], dtype=np.int64)
        kept_col, kept_x = [], []
        for blk in self.blocks():
            keep = blk.per_row(rows) & blk.per_col(cols)
            counts[blk.r0:blk.r1] = blk.row_sums(keep.astype(np.int64))
            kept_col.append(new_col[blk.col[keep]])
            kept_x.append(blk.x[keep])
        indptr = np.concatenate([[0], np.cumsum(counts[rows])]).astype(np.int64)
        return Responses((int(rows.sum()), int(cols.sum())), indptr, np.concatenate(kept_col),
                         np.concatenate(kept_x))

    def to_dense(self) -> np.ndarray:
        """The float matrix with NaN for unanswered cells."""
        A = np.full(self.shape, np.nan)
        A[np.repeat(np.arange(self.shape[0]), self.row_counts), self.col] = self.x
        return A

    @cached_property
    def _block_bounds(self) -> np.ndarray:
        """Row indices where blocks start (and the end): a new block at the first row whose
        cells begin at or after each multiple of BLOCK_CELLS."""
        starts = np.searchsorted(self.indptr[:-1], np.arange(0, self.n_cells, BLOCK_CELLS), side="left")
        return np.unique(np.concatenate([[0], starts, [self.shape[0]]]).astype(np.int64))

    def blocks(self) -> Iterator[Block]:
        """Consecutive row ranges covering every cell (at least one block, possibly empty)."""
        bounds = self._block_bounds
        for r0, r1 in zip(bounds[:-1], bounds[1:]):
            lo, hi = self.indptr[r0], self.indptr[r1]
            # numpy indexes with intp: converting once per block saves a conversion per use
            yield Block(int(r0), int(r1), self.row_counts[r0:r1], self.col[lo:hi].astype(np.intp), self.x[lo:hi])


CellValues = Callable[[Block], Sequence[np.ndarray]]


def sum_cells(R: Responses, values: CellValues, by: Literal["row", "col", "both"]) -> tuple[list, list]:
    """Per-row and/or per-column sums of per-cell values: `values(block)` returns arrays with
    one entry per cell of the block. Returns (row sums, column sums), one float array per
    value, an empty list for a direction not asked for."""
    if by not in ("row", "col", "both"):
        raise ValueError(f"by must be 'row', 'col' or 'both', got {by!r}")
    n, L = R.shape
    row_sums: list[np.ndarray] = []
    col_sums: list[np.ndarray] = []
    for k, blk in enumerate(R.blocks()):
        vals = values(blk)
        if k == 0:
            row_sums = [np.zeros(n) for _ in vals] if by != "col" else []
            col_sums = [np.zeros(L) for _ in vals] if by != "row" else []
        for acc, v in zip(row_sums, vals):
            acc[blk.r0:blk.r1] += blk.row_sums(v)
        for acc, v in zip(col_sums, vals):
            np.add.at(acc, blk.col, v)
    return row_sums, col_sums
