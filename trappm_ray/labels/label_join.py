"""Label keys to graphs: the corpus tasks a label store needs, and its joined graphs file.

A label store asks the corpus for graphs (:func:`label_tasks`, :func:`build_labeled`: the keys or
architectures it labeled) and then keeps the graphs of its keys in ``<labels>/graphs.parquet``,
adding those of newly labeled keys while keeping the rows it has.

:func:`trappm_ray.labels.examples.join_graphs` rewrites that file from one corpus. The public GPU
labels are covered by another corpus (``jobs/build_dataset.py --keys-from public``) than the CPU
labels, whose corpus may no longer exist: :func:`extend_joined_graphs` keeps every row already in
the file unchanged and appends the graph of each ok label key it lacks, taken from ``corpus``.
Keys still without a graph are reported with the reason the corpus manifest gives, and listed
in ``<labels>/unjoined.csv`` (arch, resolution, batch size, reason, the corpus error): the
committed record of which label rows no graph covers yet, and why.
"""
from __future__ import annotations

import csv
import io
import json
import logging

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trappm_ray import storage
from trappm_ray.corpus import keys, text_models
from trappm_ray.corpus.build import BuildSummary, DatasetConfig, build, read_manifest, task_name
from trappm_ray.graph.rows import GRAPHS_FILE
from trappm_ray.labels.examples import GRAPH_KEY
from trappm_ray.labels.store import device_slugs, ok_labels, read_rows

log = logging.getLogger(__name__)

ZSTD_LEVEL = 19  # the file is committed: smallest size, read speed unchanged
UNJOINED_FILE = "unjoined.csv"
UNJOINED_COLUMNS = ("arch", "resolution", "batch_size", "reason", "error")


def labeled_keys(labels_dir: str) -> dict[tuple, set[str]]:
    """Every ok label key (arch, resolution, batch_size) and the devices that measured it."""
    found: dict[tuple, set[str]] = {}
    for slug in device_slugs(labels_dir):
        t = ok_labels(labels_dir, slug)
        for key in zip(*(t.column(k).to_pylist() for k in GRAPH_KEY)):
            found.setdefault(key, set()).add(slug)
    return found


def label_tasks(labels_dir: str, hf_names: set[str], skip_joined: bool = True) -> list[keys.Task]:
    """Corpus tasks for every ok label row of every device of a label store.

    Args:
        labels_dir: the label store (``data/labels``).
        hf_names: architecture names built from transformers configs.
        skip_joined: leave out keys that ``<labels_dir>/graphs.parquet`` already holds.
    """
    have: set = set()
    joined = storage.join(labels_dir, GRAPHS_FILE)
    if skip_joined and storage.exists(joined):
        t = storage.read_table(joined, columns=list(GRAPH_KEY))
        have = set(zip(*(t.column(k).to_pylist() for k in GRAPH_KEY)))
    found = []
    for slug in device_slugs(labels_dir):
        t = ok_labels(labels_dir, slug)
        train = t.column("train_step_ms").to_pylist()
        for key, step in zip(zip(*(t.column(k).to_pylist() for k in GRAPH_KEY)), train):
            if key not in have and None not in key:
                found.append((*key, step is not None))
    return keys.from_keys(found, hf_names)


def labeled_architectures(labels_dir: str) -> frozenset[str]:
    """Every architecture with a stored label row, any device, under a label store."""
    return frozenset(a for slug in device_slugs(labels_dir)
                     for a in read_rows(labels_dir, slug).column("arch").to_pylist())


def build_labeled(cfg: DatasetConfig) -> BuildSummary:
    """:func:`trappm_ray.corpus.build.build` with what ``cfg`` asks of its label store
    (``cfg.labels``): its keys (``keys_from="labels"``) or its architectures in the grid."""
    tasks = label_tasks(cfg.labels, set(text_models.config_names())) if cfg.keys_from == "labels" else None
    return build(cfg, tasks, labeled_architectures(cfg.labels) if cfg.labels else frozenset())


def _timm_version(corpus: str) -> str:
    """The timm version the corpus was built with (its ``dataset.json``), or ""."""
    uri = storage.join(corpus, "dataset.json")
    if not storage.exists(uri):
        return ""
    return str(json.loads(storage.read_bytes(uri)).get("versions", {}).get("timm", ""))


def _reason(entry: dict | None, batch_size: int, timm_version: str = "") -> str:
    if entry is None:
        return "not built"
    if entry["status"] == "ok":
        if batch_size in (entry.get("failed_batch_sizes") or []):
            return "featurize failed"
        return "batch size not built"
    if entry["status"] == "skipped":
        return "skipped (size)"
    error = entry.get("error", "")
    if error.startswith("worker died"):
        return "worker died (memory)"
    if "Unknown model" in error:  # renamed or removed since the benchmark ran: no graph to make
        return f"not in timm {timm_version}".strip()
    return "featurize failed" if error.startswith("featurize") else "export failed"


def _listed(labels_dir: str) -> dict[tuple, tuple[str, str]]:
    """(reason, error) per key of the label store's current ``unjoined.csv``."""
    uri = storage.join(labels_dir, UNJOINED_FILE)
    if not storage.exists(uri):
        return {}
    rows = csv.DictReader(io.StringIO(storage.read_bytes(uri).decode()))
    return {(r["arch"], int(r["resolution"]), int(r["batch_size"])): (r["reason"], r["error"]) for r in rows}


def extend_joined_graphs(labels_dir: str, corpus: str, dry_run: bool = False) -> dict:
    """Append to ``<labels_dir>/graphs.parquet`` the corpus graph of every ok label key it lacks.

    Args:
        labels_dir: the label store (``data/labels``).
        corpus: a corpus holding the missing keys (``artifacts/corpus-gpu``).
        dry_run: count only; write nothing.

    Returns:
        Counts (labeled keys, kept rows, added rows, ok label rows without a graph) and the keys
        still missing, grouped by reason (``export failed``, ``featurize failed``, ``not built``...).
    """
    uri = storage.join(labels_dir, GRAPHS_FILE)
    existing = storage.read_table(uri) if storage.exists(uri) else None
    have = set()
    if existing is not None:
        have = set(zip(*(existing.column(k).to_pylist() for k in GRAPH_KEY)))
    wanted = labeled_keys(labels_dir)
    todo = sorted(k for k in wanted if k not in have)
    manifest = {e["task"]: e for e in read_manifest(corpus)}
    timm_version = _timm_version(corpus)
    before = _listed(labels_dir)
    columns = existing.column_names if existing is not None else None
    tables, missing, errors = [], {}, {}
    for arch, res in sorted({(a, r) for a, r, _ in todo}):
        sizes = sorted(b for a, r, b in todo if (a, r) == (arch, res))
        entry = manifest.get(task_name(arch, res))
        shard = storage.join(corpus, "graphs", f"{task_name(arch, res)}.parquet")
        got: set = set()
        if entry is not None and entry["status"] == "ok" and storage.exists(shard):
            t = storage.read_table(shard, columns=columns)
            t = t.filter(pc.is_in(t.column("batch_size"), pa.array(sizes, t.column("batch_size").type)))
            got = set(t.column("batch_size").to_pylist())
            tables.append(t)
        for b in sizes:
            if b not in got:
                reason = _reason(entry, b, timm_version)
                error = " ".join(str((entry or {}).get("error") or "").split())[:200]
                if entry is None and (arch, res, b) in before:  # a corpus for other keys: keep why
                    reason, error = before[(arch, res, b)]
                missing.setdefault(reason, []).append((arch, res, b))
                errors[(arch, res, b)] = error
    added = pa.concat_tables(tables, promote_options="permissive") if tables else None
    if added is not None and existing is not None:
        added = added.select(existing.column_names).cast(existing.schema)
    out = [t for t in (existing, added) if t is not None]
    label_rows_missing = sum(len(wanted[k]) for keys in missing.values() for k in keys)
    summary = {"labeled_keys": len(wanted), "kept": 0 if existing is None else existing.num_rows,
               "added": 0 if added is None else added.num_rows,
               "keys_missing": sum(len(v) for v in missing.values()),
               "label_rows_missing": label_rows_missing,
               "missing_by_reason": {r: len(v) for r, v in sorted(missing.items())},
               "missing": {r: v for r, v in sorted(missing.items())}}
    if out and not dry_run:
        table = pa.concat_tables(out)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd", compression_level=ZSTD_LEVEL,
                       row_group_size=2048)
        storage.write_bytes(uri, buf.getvalue())
        summary["bytes"] = len(buf.getvalue())
    if not dry_run:
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(UNJOINED_COLUMNS)
        for reason, missed in sorted(missing.items()):
            writer.writerows((*k, reason, errors[k]) for k in missed)
        storage.write_bytes(storage.join(labels_dir, UNJOINED_FILE), text.getvalue().encode())
    log.info("joined graphs: %s", {k: v for k, v in summary.items() if k != "missing"})
    return summary


__all__ = ["UNJOINED_COLUMNS", "UNJOINED_FILE", "ZSTD_LEVEL", "extend_joined_graphs", "labeled_keys", "label_tasks",
           "labeled_architectures", "build_labeled"]
