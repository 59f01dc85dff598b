"""The data model shared by every stage, and atomic I/O for it.

Every output is written to a temporary file in the target directory and renamed into place,
so a killed job never leaves a half-written file that a later job would trust.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

# One item schema for every dataset (SPEC §0.1). `choices` is None for short-answer items;
# `answer` is the reference (an option letter for MCQ); `aliases` lists accepted answers.
ITEM_COLUMNS = ["item_id", "dataset", "domain", "question", "choices", "answer", "aliases", "split"]


# errors that can only mean the output could not be stored (the block may read other files,
# so a generic OSError from it is passed on unchanged)
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def _cannot_write(path: Path, err: OSError) -> OSError:
    """The same kind of OSError, naming the output that could not be written."""
    return type(err)(err.errno, f"cannot write {path}: {err.strerror or err}")


def umask() -> int:
    """The process's umask (read from /proc where it can be, as setting it to read it back is
    not thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(ln.split()[1], 8) for ln in f if ln.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def share_as_created(path: str | os.PathLike) -> None:
    """Give a file or directory made by tempfile (mode 0600 or 0700, private) the mode `open`
    or `mkdir` would have given it (0666 or 0777 less the umask), so that outputs and the
    cache are as readable as the user's umask says (clusters share result directories within a
    group, e.g. umask 0002 or 0027)."""
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~umask())


def share_tree(root: str | os.PathLike) -> None:
    """`share_as_created` on `root` and everything under it: for directories written by
    libraries that make private files whatever the umask (safetensors writes every file 0600:
    weights, adapters, converted models), so a group-shared results directory stays readable."""
    share_as_created(root)
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            share_as_created(os.path.join(parent, name))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.
    The file gets the mode a plain `open` would give it (`share_as_created`). An unwritable directory or a full disk raises an OSError naming `path`; the temporary file
    is removed, so nothing half-written is left."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise _cannot_write(path, err) from err
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        share_as_created(tmp_path)
        try:
            yield tmp_path
        except OSError as err:
            if err.errno in _STORAGE_ERRNOS:
                raise _cannot_write(path, err) from err
            raise
        try:
            os.replace(tmp_path, path)
        except OSError as err:
            raise _cannot_write(path, err) from err
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)


def read_parquet(path: str | os.PathLike) -> pd.DataFrame:
    return pd.read_parquet(path)


def write_text(text: str, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(obj: Any, path: str | os.PathLike) -> None:
    write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n", path)


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json_file(path: str | os.PathLike) -> Any:
    """Parse a UTF-8 JSON file; a ValueError names the file and where it is malformed."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 (invalid byte at offset {err.start})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None


# ----------------------------------------------------------------------------- record tables

def json_lines(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSON-lines file; a ValueError names
    the file and line of invalid JSON or of a value that is not an object."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: line {line_no}: invalid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}: line {line_no}: expected a JSON object, got {type(row).__name__}")
            rows.append((line_no, row))
    return rows


#: the spellings a 0/1 field may take in a record table (a bool, a number, or text)
_TRUE, _FALSE = {"1", "1.0", "true"}, {"0", "0.0", "false"}


def write_record_table(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a long record table as `RecordTable` reads it back (by suffix: CSV, JSON Lines or
    parquet), atomically; floats keep every digit (pandas' `to_json` keeps 10) and a missing
    value is an empty cell or null."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        write_csv(df, path)
    elif suffix == ".parquet":
        write_parquet(df, path)
    elif suffix in (".jsonl", ".ndjson"):
        lines = [json.dumps({k: None if v is None or (isinstance(v, float) and np.isnan(v)) else _json_value(v)
                             for k, v in row.items()}) for row in df.to_dict("records")]
        write_text("".join(line + "\n" for line in lines), path)
    else:
        raise ValueError(f"{path}: unknown record format {suffix!r} (use .csv, .jsonl or .parquet)")


def _json_value(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def shown(value: Any) -> str:
    """`repr` of a cell as its file has it (a numpy scalar as the plain Python value)."""
    return repr(_json_value(value))


class RecordTable:
    """A long record table read from CSV, JSON Lines or parquet (by suffix: ``.csv``,
    ``.jsonl``/``.ndjson``, ``.parquet``), with accessors that check a column's values and
    raise a ValueError naming the file, the row (CSV and JSONL: its line; parquet: its 1-based
    row) and the column of the first bad value. A CSV cell or a JSON null that is empty is
    missing and a blank line is skipped; CSV cells are read as text, so "007" stays an id."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such file")
        suffix = self.path.suffix.lower()
        if suffix not in (".csv", ".jsonl", ".ndjson", ".parquet"):
            raise ValueError(f"{self.path}: unknown record format {suffix!r} (use .csv, .jsonl or .parquet)")
        try:
            if suffix == ".csv":
                # blank lines are read as empty rows and then dropped, so every row keeps its line
                frame = pd.read_csv(self.path, dtype=str, keep_default_na=False, na_values=[""],
                                    encoding="utf-8-sig", skip_blank_lines=False)
                kept = ~frame.isna().all(axis=1).to_numpy()
                self.frame = frame[kept]
                self._lines = [f"line {i + 2}" for i in np.flatnonzero(kept)]
            elif suffix == ".parquet":
                self.frame = pd.read_parquet(self.path)
                self._lines = [f"row {i + 1}" for i in range(len(self.frame))]
            else:
                self.frame, self._lines = self._read_jsonl()
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
            raise ValueError(f"{self.path}: cannot read as {suffix[1:]}: {err}") from None
        except ValueError as err:  # pyarrow's ArrowInvalid; json_lines' errors already name the file
            raise err if str(err).startswith(str(self.path)) else ValueError(f"{self.path}: {err}") from None
        self.frame = self.frame.reset_index(drop=True)
        if self.frame.empty:
            raise ValueError(f"{self.path}: no records")

    def _read_jsonl(self) -> tuple[pd.DataFrame, list[str]]:
        rows = json_lines(self.path)
        return pd.DataFrame([r for _, r in rows]), [f"line {n}" for n, _ in rows]

    def where(self, i: int) -> str:
        """The location of row `i` (0-based) in the file, as error messages name it."""
        return self._lines[i]

    def error(self, i: int, column: str, message: str) -> ValueError:
        return ValueError(f"{self.path}: {self.where(i)}, column {column!r}: {message}")

    def has(self, column: str) -> bool:
        return column in self.frame.columns

    def require(self, *columns: str) -> None:
        missing = [c for c in columns if c not in self.frame.columns]
        if missing:
            raise ValueError(f"{self.path}: missing column(s) {missing}; the file has {list(self.frame.columns)}")

    def _missing(self, column: str) -> np.ndarray:
        return self.frame[column].isna().to_numpy()

    def text(self, column: str, default: str | None = None) -> pd.Series:
        """Non-empty strings; `default` fills an absent column (a missing cell is an error)."""
        if not self.has(column):
            if default is None:
                self.require(column)
            return pd.Series(default, index=self.frame.index, dtype=object)
        s = self.frame[column]
        out = s.map(lambda v: v if isinstance(v, str) else str(v)).str.strip()
        bad = np.flatnonzero(self._missing(column) | (out == "").to_numpy())
        if bad.size:
            raise self.error(int(bad[0]), column, "missing or empty")
        return out

    def number(self, column: str, *, default: float | None = None, missing_ok: bool = False) -> np.ndarray:
        """Floats; `missing_ok` lets an empty cell be NaN; `default` fills an absent column."""
        if not self.has(column):
            if default is None:
                self.require(column)
            return np.full(len(self.frame), float(default))
        s = self.frame[column]
        if s.map(lambda v: isinstance(v, bool)).any():
            i = int(np.flatnonzero(s.map(lambda v: isinstance(v, bool)).to_numpy())[0])
            raise self.error(i, column, f"expected a number, got {shown(s.iloc[i])}")
        x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        missing = self._missing(column)
        bad = np.flatnonzero((np.isnan(x) & ~missing) | (missing & (not missing_ok)))
        if bad.size:
            i = int(bad[0])
            raise self.error(i, column, "missing" if missing[i] else f"expected a number, got {shown(s.iloc[i])}")
        return x

    def probability(self, column: str, *, missing_ok: bool = False) -> np.ndarray:
        """Floats in [0, 1] (empty cells NaN where `missing_ok`)."""
        x = self.number(column, missing_ok=missing_ok)
        bad = np.flatnonzero(~np.isnan(x) & ((x < 0) | (x > 1)))
        if bad.size:
            raise self.error(int(bad[0]), column, f"{shown(x[bad[0]])} is not a probability in [0, 1]")
        return x

    def integer(self, column: str, *, default: int | None = None) -> np.ndarray:
        x = self.number(column, default=None if default is None else float(default))
        bad = np.flatnonzero(~np.isfinite(x) | (x != np.round(x)))
        if bad.size:
            raise self.error(int(bad[0]), column, f"expected an integer, got {shown(self.frame[column].iloc[bad[0]])}")
        return x.astype(np.int64)

    def binary(self, column: str, *, default: bool | None = None) -> np.ndarray:
        """Booleans from 0/1, true/false (any case) or JSON/parquet booleans."""
        if not self.has(column):
            if default is None:
                self.require(column)
            return np.full(len(self.frame), bool(default))
        out = np.zeros(len(self.frame), dtype=bool)
        for i, v in enumerate(self.frame[column].tolist()):
            key = str(bool(v)).lower() if isinstance(v, (bool, np.bool_)) else str(v).strip().lower()
            if key in _TRUE:
                out[i] = True
            elif key not in _FALSE:
                raise self.error(i, column, f"expected 0/1 or true/false, got {shown(v)}")
        return out
