"""Tests of the Ray label job: storage, resume and compaction (tiny timm test models, CPU)."""
from __future__ import annotations

import dataclasses
import multiprocessing
import os

import pyarrow as pa
import pytest

pytest.importorskip("timm")
pytest.importorskip("ray")

from trappm_ray.labels import job as label_job
from trappm_ray.labels import plan, store
from trappm_ray.labels import harness as labels
from trappm_ray import storage  # noqa: E402


def _row(arch, batch, status="ok", date="2026-01-01T00:00:00+00:00", ms=1.0):
    spec = labels.MeasureSpec(arch, batch, 32)
    row = labels.base_row(spec, {"device": "cpu", "device_name": "Test CPU"})
    row.update(status=status, date=date, train_step_ms=ms if status == "ok" else None)
    return row


def test_done_sweeps_counts_oom_and_skips_as_finished():
    cfg = label_job.LabelJobConfig(out="unused", batch_sizes=(1, 2, 4, 8))
    rows = ([_row("a", b) for b in (1, 2, 4, 8)]  # complete
            + [_row("b", 1), _row("b", 2, "oom")]  # stopped by OOM
            + [_row("c", 1), _row("c", 2)]  # interrupted: 4 and 8 missing
            + [_row("d", 1, "error"), _row("d", 2), _row("d", 4, "skipped_slow"),
               _row("d", 8, "skipped_slow")])
    table = pa.Table.from_pylist(rows, schema=store.SCHEMA)
    assert label_job.done_sweeps(table, cfg) == {("a", 32), ("b", 32), ("d", 32)}
    assert label_job.done_sweeps(table, dataclasses.replace(cfg, optimizer="sgd")) == set()


def test_done_sweeps_remeasures_what_a_smaller_step_limit_skipped():
    cfg = label_job.LabelJobConfig(out="unused", batch_sizes=(1, 2, 4), max_step_s=5.0)
    rows = [_row("a", 1, ms=3000.0), _row("a", 2, "skipped_slow"), _row("a", 4, "skipped_slow")]
    rows[1]["error"], rows[2]["error"] = "projected step 6.0 s > 5.0 s", "projected step 12.0 s > 5.0 s"
    table = pa.Table.from_pylist(rows, schema=store.SCHEMA)
    assert label_job.done_sweeps(table, cfg) == {("a", 32)}
    assert label_job.done_sweeps(table, dataclasses.replace(cfg, max_step_s=8.0)) == set()
    assert label_job.done_sweeps(table, dataclasses.replace(cfg, max_step_s=None)) == set()


def test_done_sweeps_can_ignore_rows_measured_under_load():
    cfg = label_job.LabelJobConfig(out="unused", batch_sizes=(1, 2))
    rows = [_row("a", 1), _row("a", 2), _row("b", 1), _row("b", 2), _row("c", 1), _row("c", 2, "oom")]
    for r, load in zip(rows, (0.9, 1.2, 0.5, 2.4, 0.3, 3.0)):
        r["load_avg_before"] = r["load_avg_after"] = load
    table = pa.Table.from_pylist(rows, schema=store.SCHEMA)
    assert label_job.done_sweeps(table, cfg) == {("a", 32), ("b", 32), ("c", 32)}
    # b's batch 2 was measured under load; c's loaded row is an OOM, which load does not change
    relaxed = dataclasses.replace(cfg, remeasure_load_above=1.5)
    assert label_job.done_sweeps(table, relaxed) == {("a", 32), ("c", 32)}


def test_measured_busy_allows_for_the_measurements_own_threads():
    one, two = _row("a", 1), _row("a", 2)
    two["threads"] = 2
    for r in (one, two):
        r["load_avg_before"], r["load_avg_after"] = 0.4, 2.2  # a two-thread run alone ends near 2
    assert store.measured_busy(one) and not store.measured_busy(two)
    two["load_avg_before"] = 2.6
    assert store.measured_busy(two)


def test_measured_busy_allows_for_sibling_label_slots():
    row = _row("a", 1)
    row["load_avg_before"], row["load_avg_after"] = 1.1, 2.2  # two one-thread measurements at once
    assert store.measured_busy(row)
    row["label_slots"] = 2
    assert not store.measured_busy(row)
    row["load_avg_after"] = 3.0
    assert store.measured_busy(row)


def test_like_measures_each_stored_sweep_over_its_own_batch_sizes(tmp_path):
    like = str(tmp_path / "labels.parquet")
    stored = [_row("a", 1), _row("a", 3), _row("b", 5, "error"), _row("b", 10)]
    storage.write_table(pa.Table.from_pylist(stored, schema=store.SCHEMA), like)
    cfg = label_job.LabelJobConfig(out="unused", like=like, batch_sizes=(1, 2))
    sizes = label_job._sweeps(cfg)
    assert sizes == {("a", 32): (1, 3), ("b", 32): (5, 10)}
    measured = pa.Table.from_pylist([_row("a", 1), _row("a", 3), _row("b", 5)], schema=store.SCHEMA)
    assert label_job.done_sweeps(measured, cfg, sizes) == {("a", 32)}
    assert label_job.done_sweeps(measured, cfg) == set()  # cfg.batch_sizes: a lacks batch 2


def _claim_cores(lock_dir, queue, release):
    with label_job._own_cores(1, 2, lock_dir):
        queue.put(sorted(os.sched_getaffinity(0)))
        release.wait(30)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_sibling_label_slots_get_their_own_cores(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue, release = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_claim_cores, args=(str(tmp_path), queue, release)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=30) for _ in procs]
    with pytest.raises(RuntimeError, match="no free group"):  # a third slot finds none
        with label_job._own_cores(1, 2, str(tmp_path)):
            pass
    release.set()
    for p in procs:
        p.join(30)
    assert len(got[0]) == len(got[1]) == 1 and got[0] != got[1]
    before = os.sched_getaffinity(0)
    with label_job._own_cores(1, 1, str(tmp_path)):  # one slot: no claim, the harness pins
        assert os.sched_getaffinity(0) == before


def test_compact_keeps_latest_row_per_key(tmp_path):
    out, slug = str(tmp_path), "test-cpu-t1"
    store.write_rows(out, slug, [_row("a", 1, ms=5.0), _row("a", 2)])
    store.write_rows(out, slug, [_row("a", 1, ms=7.0, date="2026-02-01T00:00:00+00:00")])
    old = pa.table({"arch": ["z"], "batch_size": [1]})  # written before the schema grew
    storage.write_table(old, storage.join(out, slug, "parts", "old.parquet"))
    path = store.compact(out, slug)
    assert path.endswith(f"{slug}/labels.parquet")
    assert sorted(p.name for p in (tmp_path / slug).rglob("*.parquet")) == ["labels.parquet"]
    got = {(r["arch"], r["batch_size"]): r["train_step_ms"]
           for r in store.read_rows(out, slug).to_pylist()}
    assert got == {("a", 1): 7.0, ("a", 2): 1.0, ("z", 1): None}
    assert store.device_slugs(out) == [slug]


def test_coverage_order_spans_sizes_first():
    assert plan.coverage_order(list(range(5))) == [0, 4, 2, 1, 3]
    assert sorted(plan.coverage_order(list(range(11)))) == list(range(11))


def test_job_resumes_after_interruption(ray_session, tmp_path):
    cfg = label_job.LabelJobConfig(out=str(tmp_path), archs=("test_efficientnet", "test_vit"),
                                   resolutions=(32,), batch_sizes=(2, 4), warmup=1, steps=3,
                                   max_tasks=1)
    first = label_job.run_label_job(cfg)  # "interrupted" after one sweep
    assert first["sweeps_done_before"] == 0 and first["sweeps_finished"] == 1
    assert first["compact_path"].endswith("labels.parquet") and not first["sweeps_failed"]
    second = label_job.run_label_job(dataclasses.replace(cfg, max_tasks=None))
    assert second["sweeps_done_before"] == 1 and second["sweeps_finished"] == 1
    rows = store.read_rows(cfg.out, second["slug"]).to_pylist()
    assert sorted((r["arch"], r["batch_size"]) for r in rows) == [
        ("test_efficientnet", 2), ("test_efficientnet", 4), ("test_vit", 2), ("test_vit", 4)]
    assert all(r["status"] == "ok" and r["train_step_ms"] > 0 for r in rows)
    third = label_job.run_label_job(cfg)  # nothing left to do
    assert third["sweeps_planned"] == 0 and third["rows_new"] == 0
    assert "4 ok" in store.summarize(store.read_rows(cfg.out, second["slug"]))


@pytest.mark.s3
def test_storage_on_s3(s3_prefix):
    slug = "test-cpu-t1"
    store.write_rows(s3_prefix, slug, [_row("a", 1), _row("a", 2, "oom")])
    store.write_rows(s3_prefix, slug, [_row("b", 1)])
    assert store.device_slugs(s3_prefix) == [slug]
    assert store.compact(s3_prefix, slug) == f"{s3_prefix}/{slug}/labels.parquet"
    table = store.read_rows(s3_prefix, slug)
    assert table.num_rows == 3 and store._files(s3_prefix, slug)[1] == []
    cfg = label_job.LabelJobConfig(out=s3_prefix, resolutions=(32,), batch_sizes=(1, 2, 4))
    assert label_job.done_sweeps(table, cfg) == {("a", 32)}


def test_default_slug_prefers_devices_measured_here(tmp_path):
    out = str(tmp_path)
    imported = [dict(_row(f"m{i}", 1), source_repo="huggingface/pytorch-image-models") for i in range(5)]
    store.write_rows(out, "rtx4090-amp", imported)
    store.compact(out, "rtx4090-amp")
    assert store.default_slug(out) == "rtx4090-amp"  # nothing measured here: the imported set
    store.write_rows(out, "cpu-t1", [_row("a", 1), _row("a", 2)])
    store.compact(out, "cpu-t1")
    assert store.default_slug(out) == "cpu-t1"
