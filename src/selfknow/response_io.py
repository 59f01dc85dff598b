"""Reading examinee x item 0/1 response files (CSV or parquet) into sparse :class:`Responses`.

Layout of both formats: the first column holds the examinee ids, every other column is an
item; a cell is 0, 1 (also written 0.0/1.0) or blank/null for missing. Files are read a
chunk of rows at a time and kept sparse, so memory grows with the answered cells.

CSV: a leaderboard file is tens of thousands of columns wide, where pyarrow's and pandas'
per-column work dominates (pyarrow needs 12-28 s for a 5,000 x 30,000 file on the 2-core
machine, pandas about 110 s). So a chunk of lines is first tokenised with numpy when it is
plain (every line has exactly one comma per item, every item cell is empty, ``0`` or ``1``,
every id non-empty); any other chunk (``1.0``, blank lines, CRLF, a wrong field count, a bad
value) goes through the csv module, which defines what is accepted and names the line and
column of a bad cell. From the first quote on, the rest of the file goes to the csv module
whole: a quoted field may hold a newline, so a chunk cannot be cut at one. Parquet: pyarrow, in record batches.
"""
from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from selfknow.stats.responses import Responses

CSV_CHUNK_BYTES = 1 << 23  # the chunk's numpy temporaries are about 15x its size
PARQUET_BATCH_ROWS = 512

# (examinee ids, where each row is in the file, responses of those rows)
Part = tuple[list[str], list[str], Responses]


def read_responses(path: str | Path, progress: Callable[[str], None] | None = None
                   ) -> tuple[Responses, list[str], list[str]]:
    """Read a response file (parquet by its suffix ``.parquet``, CSV otherwise). Returns
    (responses, examinee ids, item ids). Raises ValueError naming the file and the line
    (CSV) or row (parquet) of a bad cell, an empty or repeated examinee id, and repeated
    item ids."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    report = progress or (lambda message: None)
    items, parts = _read_parquet(path) if path.suffix.lower() == ".parquet" else _read_csv(path)
    chunks, ids, first_seen = [], [], {}
    for part_ids, where, responses in parts:
        for eid, loc in zip(part_ids, where):
            if eid in first_seen:
                raise ValueError(f"{path}: {loc}: duplicate examinee id {eid!r} (first at {first_seen[eid]})")
            first_seen[eid] = loc
        ids.extend(part_ids)
        chunks.append(responses)
        report(f"read {len(ids)} examinees x {len(items)} items")
    if not ids:
        raise ValueError(f"{path}: no examinee rows")
    return Responses.stack(chunks), ids, items


def _item_ids(path: Path, header: list[str], where: str) -> list[str]:
    if len(header) < 2:
        raise ValueError(f"{path}: {where}: expected a header 'examinee,item1,item2,...'")
    items = [str(h).strip() for h in header[1:]]
    for k, item in enumerate(items, start=2):
        if not item:
            raise ValueError(f"{path}: {where}, column {k}: empty item id")
    repeated = sorted(i for i, c in Counter(items).items() if c > 1)
    if repeated:
        raise ValueError(f"{path}: {where}: duplicate item ids {repeated}")
    return items


# ----------------------------------------------------------------------------- CSV

def _read_csv(path: Path) -> tuple[list[str], Iterator[Part]]:
    with path.open("rb") as fh:
        header_line = fh.readline()
    header = next(csv.reader([header_line.decode("utf-8-sig")]), [])
    items = _item_ids(path, header, "line 1")

    def parts() -> Iterator[Part]:
        with path.open("rb") as fh:
            fh.seek(len(header_line))
            lineno, carry = 2, b""
            while True:
                chunk = fh.read(CSV_CHUNK_BYTES)
                data = carry + chunk
                if b'"' in data:
                    # a quoted field may hold a newline, so no cut at a newline is safe: the
                    # rest of the file goes to the csv module whole
                    data += fh.read()
                    yield _csv_lines(path, data, lineno, items)
                    return
                # whole lines only; the rest waits for the next chunk (or is the last line)
                cut = data.rfind(b"\n") + 1 if chunk else len(data)
                lines, carry = data[:cut], data[cut:]
                if lines:
                    part = _plain_lines(lines, lineno, len(items))
                    yield part if part is not None else _csv_lines(path, lines, lineno, items)
                    lineno += lines.count(b"\n")
                if not chunk:
                    return

    return items, parts()


def _plain_lines(data: bytes, first_lineno: int, n_items: int) -> Part | None:
    """Tokenise lines 'id,c,c,...,c' whose item cells are all empty, '0' or '1'; None when
    any line is not of that form (the caller then uses the csv module)."""
    if b'"' in data or b"\r" in data:
        return None
    if not data.endswith(b"\n"):
        data += b"\n"
    n = data.count(b"\n")
    buf = np.frombuffer(data, dtype=np.uint8)
    seps = np.flatnonzero((buf == ord(",")) | (buf == ord("\n")))
    # A plain line has n_items commas then its newline: n_items + 1 separators a line, the
    # last of each run a newline. With n newlines in all, that holds for every line exactly
    # when the count matches and every (n_items + 1)-th separator is a newline.
    if seps.size != n * (n_items + 1):
        return None
    S = seps.reshape(n, n_items + 1)
    if not (buf[S[:, -1]] == ord("\n")).all():
        return None
    starts = np.concatenate([[0], S[:-1, -1] + 1])
    if not (S[:, 0] > starts).all():  # an empty examinee id
        return None
    length = np.diff(S, axis=1) - 1  # item cell k of a line lies between separators k and k + 1
    if length.max() > 1:
        return None
    rows, cols = np.nonzero(length)  # the answered cells: one character each
    char = buf[S[rows, cols] + 1]
    if not ((char == ord("0")) | (char == ord("1"))).all():
        return None
    ids = [data[s:c].decode("utf-8").strip() for s, c in zip(starts.tolist(), S[:, 0].tolist())]
    if not all(ids):
        return None
    where = [f"line {first_lineno + i}" for i in range(n)]
    return ids, where, Responses.from_cells((n, n_items), rows, cols, char == ord("1"))


def _csv_lines(path: Path, data: bytes, first_lineno: int, items: list[str]) -> Part:
    """Parse lines with the csv module: skips blank lines, accepts any number equal to 0 or 1,
    and raises naming the line (and column) of the first problem."""
    reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
    ids, where, rows, cols, x = [], [], [], [], []
    for rec in reader:
        lineno = first_lineno + reader.line_num - 1
        if not rec or all(not c.strip() for c in rec):
            continue
        if len(rec) != len(items) + 1:
            raise ValueError(f"{path}: line {lineno}: {len(rec)} fields, header has {len(items) + 1}")
        eid = rec[0].strip()
        if not eid:
            raise ValueError(f"{path}: line {lineno}: empty examinee id")
        for j, cell in enumerate(rec[1:]):
            text = cell.strip()
            if not text:
                continue
            try:
                v = float(text)
            except ValueError:
                v = None
            if v not in (0.0, 1.0):
                raise ValueError(f"{path}: line {lineno} (examinee {eid!r}), column {items[j]!r}: "
                                 f"{cell!r} is not 0, 1 or blank")
            rows.append(len(ids))
            cols.append(j)
            x.append(v == 1.0)
        ids.append(eid)
        where.append(f"line {lineno}")
    cells = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(x, dtype=bool)
    return ids, where, Responses.from_cells((len(ids), len(items)), *cells)


# ----------------------------------------------------------------------------- parquet

def _read_parquet(path: Path) -> tuple[list[str], Iterator[Part]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    items = _item_ids(path, pf.schema_arrow.names, "columns")

    def parts() -> Iterator[Part]:
        first = 0
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            A = np.empty((batch.num_rows, len(items)))
            for k, item in enumerate(items):
                column = batch.column(k + 1)
                try:
                    A[:, k] = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise ValueError(f"{path}: column {item!r} ({column.type}) is not numeric: {exc}") from exc
            ids = [("" if v is None else str(v)).strip() for v in batch.column(0).to_pylist()]
            where = [f"row {first + i + 1}" for i in range(batch.num_rows)]
            answered = ~np.isnan(A)
            bad = answered & (A != 0) & (A != 1)
            if bad.any():
                i, j = np.argwhere(bad)[0]
                raise ValueError(f"{path}: {where[i]} (examinee {ids[i]!r}), column {items[j]!r}: "
                                 f"{float(A[i, j])!r} is not 0, 1 or null")
            if "" in ids:
                raise ValueError(f"{path}: {where[ids.index('')]}: empty examinee id")
            rows, cols = np.nonzero(answered)
            yield ids, where, Responses.from_cells(A.shape, rows, cols, A[rows, cols] == 1.0)
            first += batch.num_rows

    return items, parts()
