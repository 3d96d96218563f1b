"""Bring a GPU campaign run home: its rows as label rows, what is done, and the devices' datasheets.

A run directory (``rows.jsonl`` and ``run.json`` from :func:`trappm_ray.labels.campaign_run.run`)
becomes rows of ``data/labels/<gpu>-<regime>/``: ``<gpu>`` is the GPU's slug in the spec table
(``trappm_ray/data/devices.csv``, matched by the NVML name) and ``<regime>`` the precision's folder
suffix as for the imported labels (``amp`` = autocast fp16, ``amp-bf16``, ``tf32``, ``fp32``).
Rows are measured by this project: ``source_repo`` is empty, ``method`` says how, ``harness_version``
names the campaign, and the versions, driver and date are those of the run. The run's summary is
kept beside them (``raw/<campaign>-<date>.json``: rows per minute, jobs done).

The rows name their job (``campaign_item``), so ``--shard next`` on the next GPU slot starts with
the first job no committed row names (:func:`trappm_ray.labels.campaign_plan.done_items`).
"""
from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter, defaultdict

from trappm_ray import devices, storage
from trappm_ray.corpus import text_models, zoo
from trappm_ray.labels import store
from trappm_ray.labels.campaign_plan import CAMPAIGN, DRY_RUN_TEXT
from trappm_ray.labels.campaign_instruments import read_rows
from trappm_ray.graph.rows import GRAPHS_FILE
from trappm_ray.labels.examples import count_joined
from trappm_ray.labels.machine import slugify
from trappm_ray.labels.public_rows import DTYPES, REGIMES

CAMPAIGN_REGIMES = {**REGIMES, "tf32": "tf32"}
CAMPAIGN_DTYPES = {**DTYPES, "tf32": "float32"}


def gpu_slug(device_name: str) -> str:
    """The spec table's slug of an NVML GPU name, or the name slugified when the table lacks it."""
    try:
        return devices.get(device_name).slug
    except KeyError:
        return slugify(device_name)


def _family(row: dict) -> str:
    if row["model_source"] == "timm":
        return zoo.family_of(row["arch"])
    dry = DRY_RUN_TEXT.get(row["arch"])
    return str(dry["model_type"]) if dry else text_models.family_of(row["arch"])


def label_rows(run_rows: list[dict], imported: str) -> dict[str, list[dict]]:
    """Run rows as store rows, grouped by device folder."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in run_rows:
        spec = gpu_slug(r["device_name"]) if r.get("device") == "cuda" else slugify(r["device_name"])
        slug = f"{spec}-{CAMPAIGN_REGIMES[r['precision']]}"
        row = {k: r.get(k) for k in store.COLUMNS}
        row.update(device_spec=spec, device_slug=slug,
                   dtype=CAMPAIGN_DTYPES[r["precision"]], family=_family(r), date_imported=imported,
                   n_measurements=1, source_repo=None, license="Apache-2.0 (measured by this project)")
        out[slug].append(row)
    return dict(out)


def import_run(run_dir: str, labels_dir: str, imported: str | None = None) -> dict[str, Counter]:
    """Add a run's rows to the label store (latest row per key wins) and keep its summary.

    Returns:
        Row counts by status, per device folder.
    """
    imported = imported or dt.datetime.now(dt.timezone.utc).date().isoformat()
    by_slug = label_rows(read_rows(run_dir), imported)
    summary_path = os.path.join(run_dir, "run.json")
    summary = open(summary_path).read() if os.path.exists(summary_path) else None
    counts = {}
    for slug, rows in sorted(by_slug.items()):
        store.write_rows(labels_dir, slug, rows)
        store.compact(labels_dir, slug)
        if summary is not None:
            date = min(r["date"] for r in rows)[:19].replace(":", "")
            storage.write_bytes(storage.join(labels_dir, slug, "raw", f"{CAMPAIGN}-{date}.json"), summary.encode())
        counts[slug] = Counter(r["status"] for r in rows)
    return counts


def run_summaries(labels_dir: str, slug: str) -> list[dict]:
    """The summaries of the runs behind a campaign device folder."""
    folder = storage.join(labels_dir, slug, "raw")
    return [json.loads(storage.read_bytes(uri)) for uri in storage.listdir(folder, ".json")]


def _range(values) -> str:
    v = [x for x in values if x is not None]
    return f"{min(v):.4g}-{max(v):.4g}" if v else "-"


def mean_train_power_w(row: dict, least_window_s: float = 1.0) -> float | None:
    """A campaign row's mean board power over its timed training steps (W): NVML's energy
    counter over the window where the driver has it, else the mean of the sampled power readings;
    None over a window shorter than ``least_window_s``.

    Why the counter: the power reading the sampler takes is a trailing average of about a second
    on the H200 (driver 580), so over a window of 1-2 s that follows a pause it reads low while it
    catches up: GPT-2 at 512 tokens, batch 12 (a 1.0 s window), sampled mean 388 W, the readings'
    maximum 499 W, the energy counter 551 W; at batch 48 (3.1 s) 583, 599 and 588 W. The counter,
    read at the window's two ends, is coarse over short windows too: ViT-B/16 busy steps read up
    to 734 W over 1.0 s on the 700 W board, at most 702 W over 3 s and longer.
    """
    window = row.get("power_window_s") or 0.0
    if window < least_window_s:
        return None
    if row.get("energy_j") and row.get("train_steps_timed"):
        return float(row["energy_j"]) * int(row["train_steps_timed"]) / window
    return row.get("power_w_mean")


def campaign_datasheet(labels_dir: str, slug: str) -> str:
    """Markdown of a campaign device folder: provenance, contents per setting, the memory check."""
    rows = store.compact_labels(labels_dir, slug).to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    runs = run_summaries(labels_dir, slug)
    first = rows[0]
    leftover = [abs(r["leftover_mb"]) for r in ok if r["leftover_mb"] is not None]

    def values(col: str, rs=rows) -> str:
        return ", ".join(sorted({str(r[col]) for r in rs if r[col] is not None})) or "-"

    out = [f"# Labels datasheet: `{slug}`", "",
           f"Generated by `python jobs/label_datasheet.py --device {slug}`; measured by this project's GPU "
           f"campaign (`jobs/gpu_campaign.py`, docs/gpu-campaign.md).", "", "## Provenance", "",
           f"* device: {first['device_name']}, driver {values('driver')}, CUDA {values('cuda')}",
           f"* software: torch {values('torch_version')}, timm {values('timm_version')}, transformers "
           f"{values('transformers_version')}; campaign {values('harness_version')}",
           f"* method: {first['method']}",
           f"* measured {min(r['date'] for r in rows)} to {max(r['date'] for r in rows)}; "
           + "; ".join(f"a run of {s['wall_s']:.0f} s wrote {s['rows']} rows ({s['rows_per_min']:.0f} "
                       f"per minute)" for s in runs if s.get("wall_s")),
           f"* memory reset between rows: largest |allocated at a row's start - the model's own bytes| "
           f"{max(leftover, default=float('nan')):.2f} MiB over {len(leftover)} rows", "",
           "## Contents", "",
           f"* {len(rows)} rows, {len(ok)} ok; status: "
           + ", ".join(f"{s} {n}" for s, n in Counter(r["status"] for r in rows).most_common()),
           f"* {len({r['arch'] for r in ok})} models; rows with power {sum(r['power_w_mean'] is not None for r in ok)}; "
           f"ok rows joined to a graph in `{GRAPHS_FILE}`: {count_joined(labels_dir, ok)} of {len(ok)} "
           "(docs/gpu-campaign.md: how the missing ones are joined)",
           "", "| setting | models | ok | censored by memory | by time | batch | train step ms | "
           "peak reserved MiB | power W (energy counter) |", "|---|---|---|---|---|---|---|---|---|"]
    groups = defaultdict(list)
    for r in rows:
        groups[(r["precision"], r["optimizer"], r["memory_format"], r["recompute"], r["grad_accum"],
                f"TF32 {r.get('allow_tf32') or '?'}")].append(r)
    for key, rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        g = [r for r in rs if r["status"] == "ok"]
        out.append(f"| {'/'.join(map(str, key))} | {len({r['arch'] for r in rs})} | {len(g)} | "
                   f"{sum(r['status'] == 'oom' for r in rs)} | {sum(r['status'] == 'skipped_slow' for r in rs)} | "
                   f"{_range(r['batch_size'] for r in g)} | {_range(r['train_step_ms'] for r in g)} | "
                   f"{_range(r['cuda_max_reserved_mb'] for r in g)} | "
                   f"{_range(mean_train_power_w(r) for r in g)} |")
    return "\n".join(out) + "\n"


def is_campaign_device(labels_dir: str, slug: str) -> bool:
    rows = store.compact_labels(labels_dir, slug).column("harness_version").to_pylist()
    return bool(rows) and all((v or "").startswith(CAMPAIGN.split("-")[0] + "-v") for v in rows)


__all__ = ["gpu_slug", "label_rows", "import_run", "run_summaries", "mean_train_power_w", "campaign_datasheet",
           "is_campaign_device"]
