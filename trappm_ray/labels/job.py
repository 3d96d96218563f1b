"""Ray job that collects labels: one Ray task per (architecture, resolution) batch-size sweep.

Scheduling: on GPU clusters each task asks for ``num_gpus=1``. On CPU nodes one task measures
per node at a time by default, so timings never share cores with another measurement: a task
claims a whole node (``num_cpus`` = the largest node's CPU count), which is what a local or test
cluster gets. A cluster that declares a custom resource ``label_slot`` gets one task per slot:
1 per node (``ray start --resources '{"label_slot": 1}'``) keeps the node's other CPUs free for
other Ray work; one per core of one-thread measurements (``'{"label_slot": 2}'`` on 2 cores)
halves a collection's time, each row recording ``label_slots`` so that the load the sibling
measurement adds is not mistaken for other work (:func:`measured_busy`).

Storage: :mod:`trappm_ray.labels.store` (one part file per finished sweep, compacted at the end);
``<out>/plan.json`` caches the default architecture plan (:mod:`trappm_ray.labels.plan`).

The driver writes the parts (tasks return rows), so a local ``out`` works on multi-node clusters.

Resume: sweeps whose rows are already stored are skipped, so an interrupted job picks up where it
stopped; delete a sweep's rows (or part) to measure it again.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass

import pyarrow as pa

from trappm_ray import storage
from trappm_ray.labels import harness as labels
from trappm_ray.labels import machine
from trappm_ray.labels.plan import PLAN_OTHER_FAMILIES, cached_plan
from trappm_ray.labels.store import compact, read_rows, row_load, write_rows

log = logging.getLogger(__name__)

_STOPS = ("oom", "timeout", "crashed", "skipped_slow")  # statuses after which a sweep stops


@dataclass
class LabelJobConfig:
    """Configuration of one label-collection run.

    Args:
        out: output directory, local path or URI (``s3://...``).
        device: "cpu" or "cuda". archs: architectures; None = ``default_plan``.
        resolutions, batch_sizes: the grid; each (arch, resolution) is one sweep over batch sizes.
        dtype, optimizer, warmup, steps, threads, max_timed_seconds, timeout_s: see MeasureSpec.
        max_step_s: skip ("skipped_slow") batch sizes whose projected train step exceeds this.
        memory_cap_mb: per-measurement cap; None = half the node's RAM on CPU, no cap on CUDA.
        max_tasks: launch at most this many sweeps. time_budget_min: launch no new sweep after
            this many minutes (running ones finish). ray_address: None = local (or the current).
        corpus: a graph corpus (``jobs/build_dataset.py`` output); when set, only sweeps whose
            (arch, resolution) has graphs there are measured, so every label row joins a graph.
        max_params, per_family, per_other_family, other_families: the default plan (see there).
        remeasure_load_above: treat stored ok rows measured with a 1-minute load average above
            this as missing, so their sweeps run again (compaction keeps the newer rows). Timings
            taken beside other work read about 20% slow on the 2-core machine (docs/labels.md).
        like: a stored labels table (``.../<slug>/labels.parquet``) to measure again: its
            (arch, resolution) sweeps, each over its own batch sizes, replace ``archs``,
            ``resolutions`` and ``batch_sizes`` (e.g. one device's whole set on another machine).
        max_load: before each measurement, wait until the node is quiet
            (:func:`machine.wait_for_load`: load average at most this, a measurement alone making
            about 1.0), for up to ``max_load_wait_s``; then measure anyway, its load recorded.
            None = never wait.
    """

    out: str
    device: str = "cpu"
    archs: tuple[str, ...] | None = None
    resolutions: tuple[int, ...] = (64, 128)
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    dtype: str = "float32"
    optimizer: str = "adam"
    warmup: int | None = None
    steps: int | None = None
    threads: int = 1
    max_timed_seconds: float | None = 30.0
    timeout_s: float = 900.0
    max_step_s: float | None = 5.0
    memory_cap_mb: float | None = None
    max_tasks: int | None = None
    time_budget_min: float | None = None
    ray_address: str | None = None
    corpus: str | None = None
    max_params: int = 60_000_000
    per_family: int = 15
    per_other_family: int = 3
    other_families: tuple[str, ...] = PLAN_OTHER_FAMILIES
    remeasure_load_above: float | None = None
    max_load: float | None = None
    max_load_wait_s: float = 1800.0
    like: str | None = None


def _still_too_slow(row: dict, max_step_s: float | None) -> bool:
    """Whether a skipped_slow row's projected step (in its error text) still exceeds the limit."""
    match = re.match(r"projected step ([0-9.]+) s", row["error"] or "")
    return match is None or (max_step_s is not None and float(match.group(1)) > max_step_s)


def done_sweeps(table: pa.Table, cfg: LabelJobConfig,
                sizes: dict[tuple[str, int], tuple[int, ...]] | None = None) -> set[tuple[str, int]]:
    """(arch, resolution) sweeps already complete: every wanted batch size (``sizes`` of the
    sweep, default ``cfg.batch_sizes``) has a row, or a
    smaller batch size stopped the sweep (oom, timeout, crash, skipped_slow). With
    ``cfg.remeasure_load_above``, ok rows measured under a higher load do not count; a
    skipped_slow row whose projected step fits ``cfg.max_step_s`` does not count either, so a
    re-run with a larger limit measures what a smaller one skipped."""
    limit = cfg.remeasure_load_above
    seen: dict[tuple[str, int], dict[int, str]] = {}
    for r in table.to_pylist():
        loaded = limit is not None and r["status"] == "ok" and row_load(r) > limit
        if r["status"] == "skipped_slow" and not _still_too_slow(r, cfg.max_step_s):
            continue
        if r["dtype"] == cfg.dtype and r["optimizer"] == cfg.optimizer and not loaded:
            seen.setdefault((r["arch"], r["resolution"]), {})[r["batch_size"]] = r["status"]
    done = set()
    for key, got in seen.items():
        stop = min((b for b, s in got.items() if s in _STOPS), default=None)
        wanted = (sizes or {}).get(key, cfg.batch_sizes)
        if all(b in got or (stop is not None and stop <= b) for b in wanted):
            done.add(key)
    return done


def _node_label_slots() -> int:
    """This Ray node's ``label_slot`` count: how many label measurements share it at once."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    node = next((n for n in ray.nodes() if n["NodeID"] == here), {"Resources": {}})
    return int(node["Resources"].get("label_slot", 1)) or 1


@contextlib.contextmanager
def _own_cores(threads: int, slots: int, lock_dir: str | None = None):
    """Pin this process to ``threads`` cores no other label slot on the node holds, for the
    duration. The harness pins a measurement to the highest cores it may use, so without this,
    sibling slots would all share the same ones (measured: 1.5x slower steps). A lock file per
    core group (in ``lock_dir``, default the temp dir) is the claim; the OS drops it if the
    worker dies."""
    if slots <= 1:
        yield
        return
    before = sorted(os.sched_getaffinity(0))
    groups = [before[i - threads:i] for i in range(len(before), threads - 1, -threads)][:slots]
    for group in groups:
        lock = os.path.join(lock_dir or tempfile.gettempdir(), f"trappm-label-cores-{group[0]}.lock")
        handle = open(lock, "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        try:
            os.sched_setaffinity(0, group)
            yield
        finally:
            os.sched_setaffinity(0, before)  # Ray reuses the worker for other tasks
            handle.close()
        return
    raise RuntimeError(f"no free group of {threads} cores among {before} for {slots} label slots")


def _sweep_task(arch: str, resolution: int, batch_sizes: tuple[int, ...],
                cfg: LabelJobConfig) -> list[dict]:
    """Body of one Ray task: a batch-size sweep on this node."""
    import psutil

    cap = cfg.memory_cap_mb
    if cap is None and cfg.device == "cpu":  # keep one model from swapping or OOM-killing the node
        cap = psutil.virtual_memory().total / 2**20 / 2
    slots = _node_label_slots() if cfg.device == "cpu" else 1
    with _own_cores(cfg.threads, slots):
        rows = labels.sweep(arch, resolution, batch_sizes, max_step_s=cfg.max_step_s,
                            device=cfg.device, dtype=cfg.dtype, optimizer=cfg.optimizer,
                            warmup=cfg.warmup, steps=cfg.steps, threads=cfg.threads,
                            max_timed_seconds=cfg.max_timed_seconds, memory_cap_mb=cap,
                            timeout_s=cfg.timeout_s, max_load=cfg.max_load,
                            max_load_wait_s=cfg.max_load_wait_s)
    return [dict(r, label_slots=slots) for r in rows]


def _task_options(cfg: LabelJobConfig, ray) -> tuple[dict, int]:
    """Ray resources for one sweep task, and how many such tasks can run at once."""
    if cfg.device == "cuda":
        return {"num_gpus": 1, "num_cpus": 1}, max(1, int(ray.cluster_resources().get("GPU", 0)))
    slots = int(ray.cluster_resources().get("label_slot", 0))
    if slots:
        return {"num_cpus": cfg.threads, "resources": {"label_slot": 1}}, slots
    # Claim a whole node: the largest one's CPU count, so two tasks can never share a node (smaller
    # nodes then get none; heterogeneous clusters should declare label_slot instead).
    cpus = [n["Resources"]["CPU"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")]
    return {"num_cpus": max(cpus)}, cpus.count(max(cpus))


def _sweeps(cfg: LabelJobConfig) -> dict[tuple[str, int], tuple[int, ...]]:
    """(arch, resolution) -> batch sizes of every sweep to measure: those of ``cfg.like``, else
    the plan's architectures at every configured resolution and batch size."""
    if cfg.like:
        sizes: dict[tuple[str, int], set[int]] = {}
        for r in storage.read_table(cfg.like).select(["arch", "resolution", "batch_size"]).to_pylist():
            sizes.setdefault((r["arch"], r["resolution"]), set()).add(r["batch_size"])
        return {key: tuple(sorted(b)) for key, b in sizes.items()}
    return {(a, r): tuple(cfg.batch_sizes) for a in _archs(cfg) for r in cfg.resolutions}


def _archs(cfg: LabelJobConfig) -> list[str]:
    if cfg.archs:
        return list(cfg.archs)
    return cached_plan(cfg.out, min(cfg.resolutions), cfg.max_params, cfg.per_family,
                       cfg.per_other_family, cfg.other_families)


def _describe(arch: str, res: int, rows: list[dict]) -> str:
    cells = [f"b{r['batch_size']} {r['train_step_ms']:.0f}ms" if r["status"] == "ok"
             else f"b{r['batch_size']} {r['status']}" for r in rows]
    wall = sum(r["wall_s"] or 0 for r in rows)
    return f"{arch}@{res}: {', '.join(cells)} ({wall:.0f} s)"


def run_label_job(cfg: LabelJobConfig) -> dict:
    """Measure every pending (arch, resolution) sweep with Ray, store rows, compact at the end.

    Args:
        cfg: the job configuration.
    Returns:
        Summary: slug, sweeps planned/done before/launched/finished/failed, rows stored, compact path.
    """
    from trappm_ray.ray_init import ensure_ray

    # a local cluster has no label_slot: a task then claims all CPUs
    started_ray = ensure_ray(cfg.ray_address)
    import ray

    try:
        options, concurrency = _task_options(cfg, ray)
        remote = ray.remote(max_retries=1)(_sweep_task).options(**options)
        probe = ray.remote(machine.device_info).options(**options)
        slug = machine.device_slug(ray.get(probe.remote(cfg.device)), cfg.threads)
        sizes = _sweeps(cfg)
        done = done_sweeps(read_rows(cfg.out, slug), cfg, sizes)
        todo = [key for key in sizes if key not in done]
        if cfg.corpus:  # measure only what has a graph to join
            from trappm_ray.corpus.build import read_manifest

            graphs = {(e["arch"], e["resolution"]) for e in read_manifest(cfg.corpus)
                      if e["status"] == "ok"}
            todo = [t for t in todo if t in graphs]
        if cfg.max_tasks is not None:
            todo = todo[:cfg.max_tasks]
        log.info("%s: %d sweeps stored, %d to run, %d at a time with %s", slug, len(done),
                 len(todo), concurrency, options)
        start, pending, finished, failed, rows_new = time.monotonic(), {}, 0, [], 0
        budget_s = None if cfg.time_budget_min is None else cfg.time_budget_min * 60
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < concurrency and (
                    budget_s is None or time.monotonic() - start < budget_s):
                arch, res = queue.pop(0)
                pending[remote.remote(arch, res, sizes[arch, res], cfg)] = (arch, res)
            if not pending:
                break  # time budget spent
            ready, _ = ray.wait(list(pending), num_returns=1)
            arch, res = pending.pop(ready[0])
            try:
                rows = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001 - the sweep stays pending for the next run
                failed.append(f"{arch}@{res}: {exc!r}"[:300])
                log.warning("sweep failed: %s", failed[-1])
                continue
            write_rows(cfg.out, slug, rows)
            finished, rows_new = finished + 1, rows_new + len(rows)
            elapsed = time.monotonic() - start
            eta = elapsed / finished * (len(queue) + len(pending))
            log.info("[%d/%d] %s | elapsed %.1f min, eta %.1f min", finished, len(todo),
                     _describe(arch, res, rows), elapsed / 60, eta / 60)
        path = compact(cfg.out, slug)
    finally:
        if started_ray:
            ray.shutdown()
    return {"slug": slug, "sweeps_done_before": len(done), "sweeps_planned": len(todo),
            "sweeps_finished": finished, "sweeps_failed": failed, "sweeps_not_started": len(queue),
            "rows_new": rows_new, "compact_path": path}


__all__ = ["LabelJobConfig", "done_sweeps", "run_label_job"]
