"""The datasheet of an imported (public) device: sources, what each number means, coverage, and the
noise between the torch versions (or runs) that measured the same key."""
from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict

import numpy as np

from trappm_ray import storage
from trappm_ray.labels import store
from trappm_ray.graph.rows import GRAPHS_FILE
from trappm_ray.labels.examples import count_joined
from trappm_ray.labels.public import LABELS, read_raw

# How each source's numbers differ from this project's harness (docs/labels.md), by source repo.
MEANING = {
    "huggingface/pytorch-image-models": (
        "timm's `benchmark.py`. `train_step_ms` is the **mean** of 50 timed steps (after 10 "
        "warm-up) of zero_grad + forward + cross-entropy + backward + **SGD** step under **AMP** "
        "(float16 autocast), wall time synchronised with the GPU; `inference_ms` the same for an "
        "eval forward under no_grad. The batch size is the first of 256/512 halving down that "
        "did not run out of memory, so a training row's batch is about the largest that fitted "
        "in the GPU's memory. This project's harness instead takes the **median** of per-step "
        "times of the **Adam** step (CPU: float32, one thread), and sweeps batch sizes."),
    "ryujaehun/pytorch-gpu-benchmark": (
        "ryujaehun's `benchmark_models.py`. Every timed iteration is in the source; a row's "
        "`train_step_ms`/`inference_ms` is the median over the iterations (of the median of each "
        "run when several runs measured the key) and the spread columns are over all iterations. "
        "Training is forward + loss + backward **without an optimizer step** (`optimizer` none), "
        "so it reads lower than a real step (this project's harness includes the Adam step). "
        "fp16 rows are a model cast to half (not autocast), fp64 to double. With gpus > 1 the "
        "model is wrapped in `nn.DataParallel` (parallelism dp2..dp4) and `batch_size` is the "
        "batch the benchmark feeds (12 by its config.json; the folders without a config are "
        "taken at the same default)."),
    "sitar-lab/NeuSight": (
        "NeuSight's `collect_label.py` (`method/` in the copy): a transformers model built from "
        "the HF config `DLmodel_configs/<arch>.json`, random tokens of batch x sequence length, "
        "float32, timed by NeuSight's tracer (`trace_graph(bench=True)`). `train_step_ms` is "
        "`e2e_latency` = forward (`forward_ms`) + backward (`backward_ms`) with **no optimizer "
        "step**; `inference_ms` a forward. For these text models `resolution` (and `seq_len`) is "
        "the sequence length in tokens. 4-GPU rows (dp4/tp4/pp4) give only the end-to-end time. "
        "One number per file: no spread."),
}


_POOLED = ("all pairs", "consecutive")


def _version(row: dict) -> str:
    """Which run a raw row is: its torch version, or (sources without one) its file's folder and
    run suffix."""
    if row["torch_version"]:
        return row["torch_version"]
    f = row["source_file"] or "?"
    run = re.search(r"\((\d+)\)\.csv$", f)
    return f.rsplit("/", 1)[0] + (f" ({run[1]})" if run else "")


def _natural(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def version_noise(raw_rows: list[dict]) -> list[dict]:
    """|ratio - 1| between measurements of one key taken under different torch versions (or runs).

    Args:
        raw_rows: an imported device's ``raw/runs.parquet`` rows (ok ones are used).

    Returns:
        One dict per (label, memory format, compiled, version a, version b) with ``n`` keys and
        the ``median``/``p90`` of |a/b - 1| (in %); then per (label, memory format, compiled)
        one dict with version ``all pairs`` and one with ``consecutive`` (each key's versions next
        to each other in version order).
    """
    groups = defaultdict(list)
    for r in raw_rows:
        if r["status"] == "ok":
            groups[tuple(r[k] for k in store.KEY)].append(r)
    pairs = defaultdict(list)
    for rows in groups.values():
        for label in LABELS:
            runs = sorted(((_version(r), r[label]) for r in rows if r[label] is not None),
                          key=lambda t: _natural(t[0]))
            g = (label, rows[0]["memory_format"], rows[0]["compiled"])
            for (va, a), (vb, b) in itertools.combinations(runs, 2):
                if va != vb:
                    pairs[g + (va, vb)].append(abs(a / b - 1))
                    pairs[g + ("all pairs", "")].append(abs(a / b - 1))
            # next versions only: versions far apart also differ by what changed in between
            versions = sorted({v for v, _ in runs}, key=_natural)
            for va, vb in zip(versions, versions[1:]):
                a = np.median([t for v, t in runs if v == va])
                b = np.median([t for v, t in runs if v == vb])
                pairs[g + ("consecutive", "")].append(abs(a / b - 1))
    out = []
    for (label, fmt, comp, va, vb), d in sorted(pairs.items(), key=lambda kv: (
            kv[0][:3], kv[0][3] in _POOLED, _natural(kv[0][3]), _natural(kv[0][4]))):
        d = np.array(d) * 100
        out.append({"label": label, "memory_format": fmt, "compiled": comp, "a": va, "b": vb,
                    "n": len(d), "median": float(np.median(d)), "p90": float(np.percentile(d, 90))})
    return out


def _counts(rows: list[dict], col: str) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(Counter(str(r[col]) for r in rows).items()))


def _range(values) -> str:
    values = [v for v in values if v is not None]
    return f"{min(values):.3g}-{max(values):.3g}" if values else "-"


def _sources(rows: list[dict]) -> list[str]:
    out = []
    for repo in sorted({r["source_repo"] for r in rows}):
        mine = [r for r in rows if r["source_repo"] == repo]
        files = {f for r in mine for f in (r["source_file"] or "").split(";") if f}
        versions = sorted({v for r in mine for v in (r["torch_version"] or "").split(";") if v}, key=_natural)
        cuda = sorted({v for r in mine for v in (r["cuda"] or "").split(";") if v}, key=_natural)
        dates = sorted({v for r in mine for v in (r["date"] or "").split(";") if v})
        out += [f"* **{repo}** @ `{mine[0]['source_commit']}` ({mine[0]['license']}), {len(mine)} rows "
                f"from {len(files)} files; torch {versions or 'not recorded'}, CUDA "
                f"{cuda or 'not recorded'}, measured {', '.join(dates) if dates else 'on dates not recorded'}",
                f"  * {MEANING.get(repo, 'see the `method` column.')}"]
        out += [f"  * `method`: {m}" for m in sorted({m for r in mine for m in (r["method"] or "").split(";")})]
    return out


def public_datasheet(labels_dir: str, slug: str) -> str:
    """Markdown describing the imported device ``<labels_dir>/<slug>``."""
    rows = store.compact_labels(labels_dir, slug).to_pylist()
    raw_table = read_raw(labels_dir, slug)
    raw = raw_table.to_pylist() if raw_table is not None else []
    ok = [r for r in rows if r["status"] == "ok"]
    joined = count_joined(labels_dir, ok)
    first = rows[0] if rows else {}
    out = [f"# Labels datasheet: `{slug}` (imported public measurements)", "",
           f"Generated by `python jobs/label_datasheet.py --device {slug}` from "
           f"`{storage.join(labels_dir, slug, 'labels.parquet')}` (one row per key) and "
           f"`raw/runs.parquet` (one row per source measurement), written by "
           "`python jobs/import_labels.py`. Not measured by this project: every row names its "
           "source (`source_repo`, `source_commit`, `source_file`, `license`, `method`).", "",
           "## Device and sources", "",
           f"* device: {first.get('device_name')} ({first.get('device')}); spec row "
           f"`{first.get('device_spec')}` in `data/devices.csv`; imported {first.get('date_imported')}"]
    out += _sources(rows)
    out += ["", "## What the numbers mean", "",
            "* `train_step_ms`: one training step of one batch in ms (what counts as a step: above, "
            "per source); `inference_ms`: one forward of one batch in ms. A row has either or both.",
            "* When several measurements share a key (torch versions, repeated runs; nchw and "
            "nhwc are *not* duplicates but `memory_format`), the row holds their median, "
            "`n_measurements` their number, `_p10/_p90/_min/_max` the spread of everything behind "
            "them (the per-iteration times where the source has them, else the measurements "
            "themselves) and `*_steps_timed` the timed steps behind it; `raw/runs.parquet` keeps "
            "each measurement.",
            "* No memory or power labels: the sources do not measure them.", "",
            "## Contents", "",
            f"* {len(rows)} rows, {len(ok)} ok; status: {_counts(rows, 'status')}; "
            f"{len(raw)} source measurements behind them",
            f"* ok rows with `train_step_ms` {sum(r['train_step_ms'] is not None for r in ok)}, "
            f"with `inference_ms` {sum(r['inference_ms'] is not None for r in ok)}",
            f"* {len({r['arch'] for r in ok})} architectures, {len({r['family'] for r in ok})} "
            f"families; model source {_counts(ok, 'model_source')}"]
    for col in ("precision", "dtype", "memory_format", "optimizer", "compiled", "gpus",
                "parallelism", "n_measurements"):
        out.append(f"* `{col}`: {_counts(ok, col)}")
    out += [f"* batch sizes {sorted({r['batch_size'] for r in ok})}",
            f"* resolutions (text models: sequence length) {sorted({r['resolution'] for r in ok})}",
            f"* ok rows joined to a graph in `{GRAPHS_FILE}`: {joined} of {len(ok)}", "",
            "| family | archs | ok rows | train rows | inference rows | batch sizes | resolutions | "
            "train step ms | inference ms |", "|---|---|---|---|---|---|---|---|---|"]
    for fam in sorted({r["family"] for r in ok}):
        fr = [r for r in ok if r["family"] == fam]
        out.append(f"| {fam} | {len({r['arch'] for r in fr})} | {len(fr)} | "
                   f"{sum(r['train_step_ms'] is not None for r in fr)} | "
                   f"{sum(r['inference_ms'] is not None for r in fr)} | "
                   f"{min(r['batch_size'] for r in fr)}-{max(r['batch_size'] for r in fr)} | "
                   f"{','.join(map(str, sorted({r['resolution'] for r in fr})))} | "
                   f"{_range(r['train_step_ms'] for r in fr)} | {_range(r['inference_ms'] for r in fr)} |")
    out += _noise_section(raw)
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        out += ["", "## Rows that are not measurements", "",
                "| arch | resolution | batch | error | source file |", "|---|---|---|---|---|"]
        out += [f"| {r['arch']} | {r['resolution']} | {r['batch_size']} | {(r['error'] or '')[:80]} | "
                f"{r['source_file']} |" for r in bad]
    return "\n".join(out) + "\n"


def _noise_section(raw: list[dict]) -> list[str]:
    noise = version_noise(raw)
    out = ["", "## Noise between torch versions and runs", ""]
    if not noise:
        return out + ["No key of this device was measured more than once (one torch version, one "
                      "run), so the source gives no measure of its own noise here."]
    out += ["The same key measured under two torch versions (or, where the source records none, in "
            "two runs: the file's folder and run suffix) differs by |a/b - 1|: median and 90th "
            "percentile over the keys both measured, per label, memory format and compilation. "
            "Versions far apart differ by more than noise (what changed in torch, cuDNN and timm "
            "between them); consecutive versions are the closer measure of noise.", ""]
    pooled = {(n["label"], n["memory_format"], n["compiled"], n["a"]): n for n in noise if n["a"] in _POOLED}
    for (label, fmt, comp, which), n in pooled.items():
        if which == "consecutive":
            every = pooled[(label, fmt, comp, "all pairs")]
            out.append(f"* **`{label}` ({fmt}, compiled {comp}): median {n['median']:.1f}%** "
                       f"(p90 {n['p90']:.1f}%) between consecutive versions over {n['n']} pairs; "
                       f"{every['median']:.1f}% (p90 {every['p90']:.1f}%) over all {every['n']} pairs")
    out += ["", "| label | memory format | compiled | a | b | keys | median % | p90 % |",
            "|---|---|---|---|---|---|---|---|"]
    out += [f"| `{n['label']}` | {n['memory_format']} | {n['compiled']} | {n['a']} | {n['b']} | "
            f"{n['n']} | {n['median']:.1f} | {n['p90']:.1f} |" for n in noise if n["a"] not in _POOLED]
    return out


__all__ = ["MEANING", "version_noise", "public_datasheet"]
