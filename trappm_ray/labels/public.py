"""Import public GPU measurements (timm, NeuSight, ryujaehun; vTrain, Pollux, Gavel's multi-GPU runs;
Zeus's power under power limits) as label rows of the store schema.

Each source has a reader (``public_timm``, ``public_neusight``, ``public_ryujaehun``, ``public_distributed``,
``public_power``) that turns
its files into *measurements*: one dict per (source file, model), in the store's columns plus the
timed values behind it. This module groups the measurements of one key (:data:`store.KEY`: the
same model, batch, resolution, precision, memory format, GPU count, parallelism and compilation,
for instance under several torch versions) into one label row: the median of the measurements,
with the spread of everything behind them in the ``_p10/_p90/_min/_max`` columns and their number
in ``n_measurements``. The measurements themselves are kept in ``<out>/<slug>/raw/runs.parquet``
(one row each, same schema), where the datasheet reads the torch-version noise from.

A device folder is one (GPU, precision regime): ``<spec>-<regime>``, where ``<spec>`` is the GPU's
slug in ``data/devices.csv`` (also stored as ``device_spec``) and the regime is ``amp`` (float16
autocast), ``fp32``, ``fp16`` (a model cast to half) or ``fp64``.

Architecture names: timm models by their timm name; torchvision models as
``torchvision_<name>`` (timm itself has ``tv_*`` models, so a ``tv_`` prefix would collide);
NeuSight's language models by their config name (``bert_large``, ``gpt2_large``, ...), whose
``resolution`` is the sequence length. ``model_source`` says which library builds the model:
``timm``, ``torchvision`` or ``transformers`` (from ``DLmodel_configs/<arch>.json``).

Malformed source rows (missing or non-positive times, unknown model names) become
``status="error"`` rows with the reason in ``error``; files that cannot be read as a source at all
are skipped and listed in the summary's ``issues``. Nothing in a source makes the import fail.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from trappm_ray import storage
from trappm_ray.labels import public_distributed, public_neusight, public_power, public_ryujaehun, public_timm, store
from trappm_ray.labels.public_rows import REGIMES, Source, device_names, measurement

log = logging.getLogger(__name__)

LABELS = ("train_step_ms", "inference_ms")
_STEPS = {"train_step_ms": "train_steps_timed", "inference_ms": "inference_steps_timed"}
# Numbers that describe one measurement besides its time: summarised as the median over the runs.
_NUMBERS = ("train_samples_per_s", "inference_samples_per_s", "gmacs", "macts", "forward_ms",
            "backward_ms", "params")
# Provenance that may differ between the runs of one key: every distinct value, ';'-joined.
_JOINED = ("torch_version", "cuda", "source_file", "date", "method", "device_name")
RAW_FILE = ("raw", "runs.parquet")


@dataclass
class ImportSummary:
    """What an import wrote: rows per device, and the source files or rows it could not use."""
    devices: dict[str, dict[str, int]] = field(default_factory=dict)
    issues: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"{'device':24s} {'rows':>6s} {'ok':>6s} {'train':>6s} {'infer':>6s} {'error':>6s} "
                 f"{'runs':>6s}"]
        for slug, c in sorted(self.devices.items()):
            lines.append(f"{slug:24s} {c['rows']:6d} {c['ok']:6d} {c['train_ok']:6d} "
                         f"{c['inference_ok']:6d} {c['error']:6d} {c['runs']:6d}")
        lines += [f"{len(self.issues)} issue(s):"] + [f"  {i}" for i in self.issues]
        return "\n".join(lines)


def _spread(label: str, values: list[float], samples: list[float]) -> dict:
    """Median of the runs' values; percentiles and extremes of every sample behind them."""
    s = np.asarray(samples, dtype=float)
    return {label: float(np.median(values)), f"{label}_p10": float(np.percentile(s, 10)),
            f"{label}_p90": float(np.percentile(s, 90)), f"{label}_min": float(s.min()),
            f"{label}_max": float(s.max())}


def _public(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.startswith("_")}


def _merge(runs: list[dict]) -> dict:
    """One label row from the ok measurements of one key."""
    row = _public(runs[0])
    for label in LABELS:
        mine = [m for m in runs if m["_label"] == label]
        if mine:
            row.update(_spread(label, [m["_value"] for m in mine], [s for m in mine for s in m["_samples"]]))
            steps = [m.get(_STEPS[label]) for m in mine]
            row[_STEPS[label]] = sum(steps) if None not in steps else None
    for col in _NUMBERS:
        values = [m[col] for m in runs if m.get(col) is not None]
        if values:
            row[col] = type(values[0])(np.median(values))
    for col in _JOINED:
        values = sorted({str(m[col]) for m in runs if m.get(col) is not None})
        row[col] = ";".join(values) if values else None
    row["n_measurements"] = len(runs)
    return row


def summarise(measurements: list[dict], imported: str) -> tuple[list[dict], list[dict]]:
    """Group measurements by :data:`store.KEY` into label rows.

    Args:
        measurements: rows from :func:`measurement` (any sources and devices).
        imported: the import's date (``date_imported`` of every row).

    Returns:
        (label rows, raw rows): one label row per key (the median of its ok measurements, or one
        error row when none is ok) and one raw row per measurement.
    """
    groups = defaultdict(list)
    for m in measurements:
        groups[tuple(m.get(k) for k in store.KEY)].append(m)
    rows = []
    for ms in groups.values():
        ok = [m for m in ms if m["status"] == "ok"]
        if ok:
            rows.append(_merge(ok) | {"date_imported": imported})
        else:
            reasons = sorted({m["error"] for m in ms})
            rows.append(_public(ms[0]) | {"error": "; ".join(reasons)[:1000], "n_measurements": len(ms),
                                          "date_imported": imported})
    raw = []
    for m in measurements:
        r = _public(m) | {"n_measurements": 1, "date_imported": imported}
        if m["status"] == "ok":
            r.update(_spread(m["_label"], [m["_value"]], m["_samples"]))
        raw.append(r)
    return rows, raw


def write_device(out: str, slug: str, rows: list[dict], raw: list[dict]) -> str:
    """Replace ``<out>/<slug>`` with ``rows`` (compact ``labels.parquet``) and ``raw/runs.parquet``.

    An import owns its device folders whole: rows of an earlier import are removed first, so a
    key that left the sources does not linger.
    """
    for uri in (storage.listdir(storage.join(out, slug), ".parquet")
                + storage.listdir(storage.join(out, slug, "parts"), ".parquet")):
        fs, path = storage.fs_and_path(uri)
        fs.rm(path)
    store.write_rows(out, slug, rows)
    uri = store.compact(out, slug)
    storage.write_table(pa.Table.from_pylist(raw, schema=store.SCHEMA), storage.join(out, slug, *RAW_FILE))
    return uri


def read_raw(out: str, slug: str) -> pa.Table | None:
    """The per-measurement rows of an imported device (None for devices measured here)."""
    uri = storage.join(out, slug, *RAW_FILE)
    return store.conform(storage.read_table(uri)) if storage.exists(uri) else None


def import_public(root: str, out: str, sources: tuple[str, ...] = ("timm", "neusight", "ryujaehun"),
                  imported: str | None = None) -> ImportSummary:
    """Import every public source under ``root`` into label device folders under ``out``.

    Args:
        root: the public copy (``../shared/data/public-gpu``: ``timm/``, ``neusight/``, ``ryujaehun/``;
            ``../shared/data/public-distributed``: ``vtrain/``, ``pollux/``, ``gavel/``, kept in a
            store of their own, ``data/labels-distributed``, so no one-GPU trainer reads them;
            ``../shared/data/public-power``: ``zeus/``, in ``data/labels-power``: its times include
            the data loader).
        out: the label store (``data/labels``); device folders of these sources are replaced.
        sources: which readers to run.
        imported: the import date written to ``date_imported`` (default: today, UTC).

    Returns:
        Row counts per device and the issues met (skipped files, malformed rows).
    """
    readers = {"timm": public_timm.read, "neusight": public_neusight.read, "ryujaehun": public_ryujaehun.read,
               "vtrain": public_distributed.read_vtrain, "pollux": public_distributed.read_pollux,
               "gavel": public_distributed.read_gavel, "zeus": public_power.read_zeus}
    imported = imported or dt.datetime.now(dt.timezone.utc).date().isoformat()
    summary, measurements = ImportSummary(), []
    for name in sources:
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            summary.issues.append(f"{name}: no folder {folder}")
            continue
        found, issues = readers[name](folder)
        log.info("%s: %d measurements, %d issues", name, len(found), len(issues))
        measurements += found
        summary.issues += [f"{name}: {i}" for i in issues]
    by_slug = defaultdict(list)
    for m in measurements:
        by_slug[m["device_slug"]].append(m)
    for slug, ms in sorted(by_slug.items()):
        rows, raw = summarise(ms, imported)
        write_device(out, slug, rows, raw)
        ok = [r for r in rows if r["status"] == "ok"]
        summary.devices[slug] = {
            "rows": len(rows), "ok": len(ok), "runs": len(raw),
            "train_ok": sum(r.get("train_step_ms") is not None for r in ok),
            "inference_ok": sum(r.get("inference_ms") is not None for r in ok),
            "error": len(rows) - len(ok)}
        bad = [m for m in ms if m["status"] != "ok"]
        summary.issues += [f"{slug}: {m.get('arch')} b{m.get('batch_size')} ({m.get('source_file')}): "
                           f"{m['error']}" for m in bad]
        log.info("%s: %d rows (%d ok) from %d measurements", slug, len(rows), len(ok), len(ms))
    return summary


__all__ = ["Source", "LABELS", "RAW_FILE", "REGIMES", "ImportSummary", "device_names", "measurement",
           "summarise", "write_device", "read_raw", "import_public"]
