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


def json_lines(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON-lines file; ValueError naming the
    file and line of one that is not a JSON object."""
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
            yield line_no, row


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
