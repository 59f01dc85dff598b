"""A killed generation job, rerun, loses and duplicates no records (issue: foundation/faults)."""
import pandas as pd
import pytest

from selfknow.resumable import map_chunks


class Killed(Exception):
    pass


def _items(n):
    return pd.DataFrame({"item_id": [f"i{k}" for k in range(n)], "x": range(n)})


def test_resume_after_kill_is_identical(tmp_path):
    calls = []

    def fn(chunk, fail_at=None):
        calls.append(list(chunk.item_id))
        if fail_at is not None and chunk.x.iloc[0] >= fail_at:
            raise Killed()
        return chunk.assign(y=chunk.x * 2)

    items = _items(50)
    out = tmp_path / "a.parquet"
    with pytest.raises(Killed):
        map_chunks(items, lambda c: fn(c, fail_at=20), out, chunk_size=10)
    assert not out.exists()  # nothing half-written
    calls.clear()
    resumed = map_chunks(items, fn, out, chunk_size=10)
    assert [c[0] for c in calls] == ["i20", "i30", "i40"]  # only the unfinished chunks ran
    clean = map_chunks(items, fn, tmp_path / "b.parquet", chunk_size=10)
    assert resumed.equals(clean)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert resumed.item_id.is_unique and len(resumed) == 50
    assert not (tmp_path / "a.parquet.parts").exists()


def test_parts_of_another_job_are_ignored(tmp_path):
    out = tmp_path / "a.parquet"
    with pytest.raises(Killed):
        map_chunks(_items(20), lambda c: (_ for _ in ()).throw(Killed()) if c.x.iloc[0] >= 10 else c.assign(y=0),
                   out, chunk_size=10, params={"v": 1})
    res = map_chunks(_items(20), lambda c: c.assign(y=1), out, chunk_size=10, params={"v": 2})
    assert (res.y == 1).all()
