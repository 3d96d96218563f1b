"""Measurement noise of stored labels: re-measure a random sample and compare.

Each stored row is measured again with the same harness settings in a fresh process; the
relative difference |new - stored| / stored of each label, over the sample, is the noise a
predictor cannot beat (and the tolerance for "an independent re-measurement agrees").
:func:`compare_sets` does the same for two whole stored sets of one device (e.g. the set measured
again on another machine), split by whether the first set's row was measured beside other work.
"""
from __future__ import annotations

import random
from statistics import median

from trappm_ray.labels import store
from trappm_ray.labels import harness as labels
from trappm_ray.labels import machine

LABELS = ("train_step_ms", "inference_ms", "mem_peak_rss_mb", "mem_above_baseline_mb")


def remeasure(out: str, slug: str, n: int = 20, seed: int = 0,
              max_load: float | None = None) -> dict:
    """Re-measure ``n`` stored ok rows of ``<out>/<slug>``.

    Args:
        out, slug: the label store and device directory (see :mod:`trappm_ray.labels.job`).
        n: rows to re-measure, drawn with ``seed`` from the quieter half of the stored rows
            (by 1-minute load average while they were measured: timings taken under load are
            not a fair reference).
        max_load: draw only from rows measured at a load of at most this (when at least ``n``
            are), and wait before each re-measurement until the machine is that quiet
            (:func:`machine.wait_for_load`, up to 30 minutes).

    Returns:
        ``{"measured_on": ..., "rows": [...], "summary": {label: {"median": ..., "worst": ...,
        "ratio_median": ...}}}``: where the re-measurement ran (:func:`machine.device_info`),
        absolute relative differences as fractions and the median of new / stored (below 1:
        faster now, a bias rather than noise when the rows agree on it); each row keeps its
        stored load average and machine.
    """
    rows = sorted((r for r in store.read_rows(out, slug).to_pylist() if r["status"] == "ok"),
                  key=store.row_load)
    quiet = rows[: max(n, len(rows) // 2)]
    if max_load is not None and sum(store.row_load(r) <= max_load for r in rows) >= n:
        quiet = [r for r in rows if store.row_load(r) <= max_load]
    sample = random.Random(seed).sample(quiet, min(n, len(quiet)))
    info = machine.device_info(sample[0]["device"]) if sample else None
    results = []
    for row in sample:
        spec = labels.MeasureSpec(
            arch=row["arch"], batch_size=row["batch_size"], resolution=row["resolution"],
            dtype=row["dtype"], optimizer=row["optimizer"], device=row["device"],
            warmup=row["warmup"], steps=row["steps"], threads=row["threads"])
        if max_load is not None:
            machine.wait_for_load(max_load, 1800.0)
        new = labels.measure(spec, info)
        diff = {k: abs(new[k] - row[k]) / row[k] for k in LABELS
                if new.get(k) is not None and row.get(k)}
        results.append({"arch": row["arch"], "resolution": row["resolution"],
                        "batch_size": row["batch_size"], "status": new["status"],
                        "stored_load_avg": store.row_load(row),
                        "stored_machine_id": row.get("machine_id"), "stored_date": row["date"],
                        **{f"{k}_stored": row[k] for k in LABELS},
                        **{f"{k}_new": new.get(k) for k in LABELS}, "rel_diff": diff})
    summary = {}
    for k in LABELS:
        d = [r["rel_diff"][k] for r in results if k in r["rel_diff"]]
        if d:
            ratio = median(r[f"{k}_new"] / r[f"{k}_stored"] for r in results if k in r["rel_diff"])
            summary[k] = {"median": median(d), "worst": max(d), "ratio_median": ratio, "n": len(d)}
    return {"measured_on": info, "rows": results, "summary": summary}


def ratio_summary(ratios: list[float]) -> dict:
    """n, median, p10, p90 of ratios (new / old), and the median of |ratio - 1|."""
    xs = sorted(ratios)
    return {"n": len(xs), "ratio_median": median(xs), "ratio_p10": xs[len(xs) // 10],
            "ratio_p90": xs[-1 - len(xs) // 10], "abs_diff_median": median(abs(x - 1) for x in xs)}


def compare_sets(old_out: str, new_out: str, slug: str) -> dict:
    """Compare two stored label sets of one device row by row (same key, both ok).

    Returns:
        ``{label: {"all" | "old_quiet" | "old_busy": {"n", "ratio_median", "ratio_p10",
        "ratio_p90", "abs_diff_median"}}}`` of new / old, where old_busy rows are the ones the old
        set measured beside other work (:func:`store.measured_busy`); plus
        ``"machines": {"old": [...], "new": [...]}``.
    """
    def ok_rows(out):
        return {tuple(r[k] for k in store.KEY): r for r in store.read_rows(out, slug).to_pylist()
                if r["status"] == "ok"}

    old, new = ok_rows(old_out), ok_rows(new_out)
    both = [(old[k], new[k]) for k in old.keys() & new.keys()]
    result: dict = {"machines": {"old": sorted({o["machine_id"] or "?" for o, _ in both}),
                                 "new": sorted({n["machine_id"] or "?" for _, n in both})}}
    for k in LABELS:
        pairs = [(o, n) for o, n in both if o.get(k) and n.get(k) is not None]
        groups = {"all": pairs, "old_quiet": [p for p in pairs if not store.measured_busy(p[0])],
                  "old_busy": [p for p in pairs if store.measured_busy(p[0])]}
        result[k] = {name: ratio_summary([n[k] / o[k] for o, n in ps]) for name, ps in groups.items() if ps}
    return result
