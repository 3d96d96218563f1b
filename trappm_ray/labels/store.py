"""The label store: the one row schema and how label rows are kept, read, merged and summarised.

Layout (a local path or ``s3://bucket/prefix``, through :mod:`trappm_ray.storage`)::

    <out>/<device-slug>/parts/*.parquet      one part per finished sweep or import (tmp + rename
                                             locally, a single PUT on S3: never half-written)
    <out>/<device-slug>/labels.parquet       compact zstd file merged from the parts (committed)

One row per measurement; its key is :data:`KEY`. Columns added later read as nulls in older files
(:func:`conform`).
"""
from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from trappm_ray import storage

STATUSES = ("ok", "oom", "error", "crashed", "timeout", "skipped_slow")
_SPREAD = ("", "_p10", "_p90", "_min", "_max")
_F, _I, _S = "float", "int", "str"

# Flat row schema, column -> type. One row per measurement; the key is KEY.
COLUMNS: dict[str, str] = {
    "device_slug": _S, "arch": _S, "family": _S, "resolution": _I, "batch_size": _I, "dtype": _S,
    "optimizer": _S, "device": _S, "status": _S, "error": _S,
    **{f"train_step_ms{s}": _F for s in _SPREAD}, "train_steps_timed": _I,
    **{f"inference_ms{s}": _F for s in _SPREAD}, "inference_steps_timed": _I,
    "mem_peak_rss_mb": _F, "mem_above_baseline_mb": _F, "mem_baseline_mb": _F, "memory_cap_mb": _F,
    "cuda_max_allocated_mb": _F, "cuda_max_reserved_mb": _F, "nvml_used_mb": _F,
    "power_w_mean": _F, "power_w_max": _F, "params": _I, "threads": _I, "cores": _S, "logical_cpus": _I,
    "load_avg_before": _F, "load_avg_after": _F, "label_slots": _I, "ref_step_ms": _F, "wall_s": _F,
    "device_name": _S, "driver": _S, "cuda": _S, "torch_version": _S, "timm_version": _S,
    "exporter": _S, "machine_id": _S, "boot_id": _S, "warmup": _I, "steps": _I, "date": _S,
    "harness_version": _S,
    # What varies a measurement besides the model (imported public labels: labels/public.py). Null in
    # this project's CPU rows. precision: fp32, amp-fp16, amp-bf16, fp16, bf16, fp64;
    # memory_format: nchw, nhwc, none; parallelism: single, dp<N>, tp4, pp4, tp<T>-pp<P>-dp<D>; compiled: none,
    # dynamo, fusion. For text models `resolution` holds the sequence length (= seq_len).
    "precision": _S, "memory_format": _S, "gpus": _I, "parallelism": _S, "compiled": _S,
    "model_source": _S, "device_spec": _S, "seq_len": _I,
    "train_samples_per_s": _F, "inference_samples_per_s": _F, "gmacs": _F, "macts": _F,
    "forward_ms": _F, "backward_ms": _F, "n_measurements": _I,
    # Provenance of imported rows (trappm_ray/labels/public.py): where the numbers come from.
    "source_repo": _S, "source_commit": _S, "source_file": _S, "license": _S, "method": _S,
    "date_imported": _S,
    # The GPU campaign's rows (labels/campaign_run.py): the setting beyond precision and optimizer,
    # the optimizer's share of the step, power and clocks over the timed steps, and the memory check.
    "recompute": _S, "grad_accum": _I, "optimizer_ms": _F, "power_samples": _I, "power_window_s": _F,
    "energy_j": _F, "inference_power_w_mean": _F, "sm_clock_mhz": _F, "leftover_mb": _F, "first_step_ms": _F,
    "campaign_item": _S, "transformers_version": _S,
    # Which fp32 operations the run let use TF32 (PyTorch's two flags): ``none`` (strict FP32),
    # ``conv`` (cuDNN only: PyTorch's default), ``matmul``, ``all``. Null where the source does not
    # say (public rows: PyTorch's default of their time).
    "allow_tf32": _S,
    # cuDNN's autotuning (``torch.backends.cudnn.benchmark``) during the run, ``on`` or ``off``: its
    # trial workspaces, not the step, set the memory peaks of a convolution's first batches (the
    # campaign's first slot, 2026-11-27, ran with it on). Null where the source does not say.
    "cudnn_benchmark": _S,
    # Multi-GPU rows (labels/public_distributed.py): samples per optimizer step over every GPU, the
    # nodes and GPUs per node (``2x4``, ``2+1+1``; Gavel's ``packed``/``spread``), the interconnect
    # as the source states it, and the measured gradient synchronisation where the source splits it.
    "global_batch": _I, "nodes": _I, "placement": _S, "cluster": _S, "allreduce_ms": _F,
    # Power rows (labels/public_power.py): the GPU's power limit during the measurement and the
    # samples of the epoch its time was divided over.
    "power_limit_w": _F, "samples_per_epoch": _I,
}
KEY = ("device_slug", "arch", "resolution", "batch_size", "dtype", "optimizer", "precision",
       "memory_format", "gpus", "parallelism", "compiled", "recompute", "grad_accum", "placement", "power_limit_w")

SCHEMA = pa.schema([(name, {"str": pa.string(), "int": pa.int64(), "float": pa.float64()}[kind])
                    for name, kind in COLUMNS.items()])

def write_rows(out: str, slug: str, rows: list[dict]) -> str:
    """Store ``rows`` as a new part file (atomic: a resume never sees half a file); its URI."""
    uri = storage.join(out, slug, "parts", f"{uuid.uuid4().hex[:12]}.parquet")
    storage.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), uri)
    return uri


def device_slugs(out: str) -> list[str]:
    """Device directories stored under ``out``."""
    fs, path = storage.fs_and_path(out)
    try:
        return sorted(os.path.basename(i["name"].rstrip("/")) for i in fs.ls(path, detail=True)
                      if i["type"] == "directory")
    except FileNotFoundError:
        return []


def _files(out: str, slug: str) -> tuple[list[str], list[str]]:
    """(compact file if any, part files) of one device."""
    return (storage.listdir(storage.join(out, slug), ".parquet"),
            storage.listdir(storage.join(out, slug, "parts"), ".parquet"))


def conform(table: pa.Table) -> pa.Table:
    """``table`` in the current SCHEMA: columns added since it was written become nulls."""
    cols = [table[f.name].cast(f.type) if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type) for f in SCHEMA]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def read_rows(out: str, slug: str) -> pa.Table:
    """All stored rows of one device (compact file plus parts), in the current SCHEMA."""
    compacted, parts = _files(out, slug)
    tables = [conform(storage.read_table(uri)) for uri in compacted + parts]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def compact(out: str, slug: str) -> str | None:
    """Merge ``<out>/<slug>`` parts into ``labels.parquet`` (latest row per KEY wins); drop the parts.

    Returns:
        The compact file's URI, or None when nothing is stored.
    """
    parts = _files(out, slug)[1]
    table = read_rows(out, slug)
    if table.num_rows == 0:
        return None
    latest = {tuple(r[k] for k in KEY): r for r in sorted(table.to_pylist(), key=lambda r: r["date"] or "")}
    rows = sorted(latest.values(), key=lambda r: (r["family"] or "", r["arch"] or "", r["resolution"] or 0,
                                                          r["batch_size"] or 0))
    uri = storage.join(out, slug, "labels.parquet")
    storage.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), uri)
    for part in parts:  # only after the compact file holds their rows
        fs, path = storage.fs_and_path(part)
        fs.rm(path)
    return uri


def row_load(row: dict) -> float:
    """The higher of a row's 1-minute load averages before and after its measurement."""
    return max(row["load_avg_before"] or 0.0, row["load_avg_after"] or 0.0)


def measured_busy(row: dict) -> bool:
    """Whether other work ran beside a row's measurement: its load exceeded the load the node's
    label measurements make (their thread count times the node's ``label_slots``) by more than
    half a CPU."""
    return row_load(row) > (row["threads"] or 1) * (row.get("label_slots") or 1) + 0.5


def compact_labels(labels_dir: str, slug: str) -> pa.Table:
    """The device's compact ``labels.parquet`` only: part files of a collection still running
    are left out, so training and evaluation see a fixed snapshot (the committed file).
    ``jobs/collect_labels.py --compact-only`` merges finished parts into it."""
    return conform(storage.read_table(storage.join(labels_dir, slug, "labels.parquet")))


def ok_labels(labels_dir: str, slug: str) -> pa.Table:
    return compact_labels(labels_dir, slug).filter(pc.equal(pc.field("status"), "ok"))


def source_rows(labels_dir: str, slug: str, repo: str) -> list[dict]:
    """The ok rows of one device folder (none where it holds none) that come from the public
    source repository ``repo``."""
    return [r for r in read_rows(labels_dir, slug).to_pylist() if r["status"] == "ok" and r["source_repo"] == repo]


def default_slug(labels_dir: str) -> str:
    """The device with the most successful rows measured by this project's harness (imported
    public sets, whose rows name a ``source_repo``, only where there is no other)."""
    tables = {s: ok_labels(labels_dir, s) for s in device_slugs(labels_dir)}
    if not tables:
        raise FileNotFoundError(f"no label rows under {labels_dir}")
    ours = {s: t.column("source_repo").null_count for s, t in tables.items()}
    counts = ours if any(ours.values()) else {s: t.num_rows for s, t in tables.items()}
    return max(counts, key=counts.get)


def summarize(table: pa.Table) -> str:
    """A short text summary of stored rows: counts per status, per family, and step-time range."""
    rows = table.to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    lines = [f"{len(rows)} rows, {len(ok)} ok, {len({r['arch'] for r in ok})} architectures; status: "
             + ", ".join(f"{s}={sum(r['status'] == s for r in rows)}" for s in STATUSES
                         if any(r["status"] == s for r in rows))]
    for fam in sorted({r["family"] for r in ok}):
        fr = [r for r in ok if r["family"] == fam]
        lines.append(f"  {fam:14s} {len(fr):5d} ok rows, {len({r['arch'] for r in fr}):3d} archs, "
                     f"train {min(r['train_step_ms'] for r in fr):.0f}-{max(r['train_step_ms'] for r in fr):.0f} ms")
    return "\n".join(lines)



__all__ = ["COLUMNS", "KEY", "SCHEMA", "STATUSES", "write_rows", "device_slugs", "conform", "read_rows", "source_rows",
           "compact", "compact_labels", "ok_labels", "default_slug", "row_load", "measured_busy",
           "summarize"]
