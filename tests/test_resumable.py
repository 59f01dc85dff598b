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


def test_parts_stamped_with_another_model_identity_are_discarded_and_logged(tmp_path, caplog):
    out = tmp_path / "a.parquet"
    with pytest.raises(Killed):
        map_chunks(_items(20), lambda c: (_ for _ in ()).throw(Killed()) if c.x.iloc[0] >= 10 else c.assign(y=0),
                   out, chunk_size=10, params={"v": 1}, model={"model_id": "m", "revision": "w1"})
    with caplog.at_level("WARNING"):
        res = map_chunks(_items(20), lambda c: c.assign(y=1), out, chunk_size=10, params={"v": 1},
                         model={"model_id": "m", "revision": "w2"})
    assert (res.y == 1).all() and res.attrs["resumed_chunks"] == 0
    assert "discarding 1 partial chunk(s) of another run (different model.revision)" in caplog.text


def test_lcae_stage1_resume_after_a_weight_swap_keeps_no_old_record(tmp_path, monkeypatch, caplog):
    """Issue 24's case: an LCAE Stage-1 job killed after its first chunk, the local model's
    weights replaced at the same path, the job rerun: its records are a clean run's on the new
    weights, none from the old ones (before, 48 of 50 read-outs came from the old weights)."""
    pytest.importorskip("torch")
    from model_fixtures import build_tiny_gpt2

    import selfknow.protocols.lcae.jobs as J
    from selfknow.records import read_parquet, write_parquet

    items = pd.DataFrame({"item_id": [f"q{k:02d}" for k in range(30)],
                          "question": [f"what is item {k}?" for k in range(30)],
                          "choices": [["cat", "dog", "mat", "bone"]] * 30, "answer": ["A"] * 30})
    write_parquet(items, tmp_path / "items.parquet")
    weights = build_tiny_gpt2(tmp_path / "model", seed=0)
    spec = {"name": "tiny", "backend": "hf", "path": str(weights), "chat": False, "dtype": "float32"}

    def stage1(out, **kw):
        return J.stage1_job(str(tmp_path / "items.parquet"), spec, "final", ["standard", "knowledge"], str(out),
                            cache_dir=str(tmp_path / "cache"), max_new_tokens=4, **kw)

    stage1(tmp_path / "old.parquet")
    real, calls = J.answer_items, []

    def killed_in_second_chunk(*a, **k):
        calls.append(1)
        if len(calls) > 2:  # chunk 1 holds 30 standard + 20 knowledge records: two calls
            raise Killed()
        return real(*a, **k)

    monkeypatch.setattr(J, "answer_items", killed_in_second_chunk)
    with pytest.raises(Killed):
        stage1(tmp_path / "run.parquet")
    assert len(list((tmp_path / "run.parquet.parts").glob("*.parquet"))) == 1
    monkeypatch.setattr(J, "answer_items", real)
    build_tiny_gpt2(weights, seed=1)  # new weights at the same path
    with caplog.at_level("WARNING"):
        stage1(tmp_path / "run.parquet")
    assert "different model.revision" in caplog.text
    stage1(tmp_path / "clean.parquet")
    run, clean, old = (read_parquet(tmp_path / f"{n}.parquet") for n in ("run", "clean", "old"))
    assert run.equals(clean)
    assert (run["raw"] != old["raw"]).sum() > 0  # the swap did change the read-outs
