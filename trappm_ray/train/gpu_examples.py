"""The examples of every device-aware GPU model: public GPU label rows joined to their graphs,
each with its roofline floor on the row's device and the device-aware feature vector
(:mod:`trappm_ray.model.device_features`). The GPU evaluation, the spec-based predictor and the
shipped GPU predictors are all fitted on them.
"""
from __future__ import annotations

import glob
import logging
import os

import pyarrow.parquet as pq

from trappm_ray import devices, storage
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.graph.rows import GRAPHS_FILE
from trappm_ray.labels.examples import GRAPH_KEY, same_model
from trappm_ray.labels.store import device_slugs, ok_labels
from trappm_ray.model.device_features import (SETTING_COLS, feature_vector, optimizer_of, roofline_features,
                                              settings_of)
from trappm_ray.model.floor_ratio import TARGET_MODES
from trappm_ray.physics.step_model import launches

log = logging.getLogger(__name__)


def graph_index(labels_dir: str, corpora: tuple[str, ...]) -> dict[tuple, dict]:
    """Graph rows by (arch, resolution, batch size): the labels' joined graphs, then corpora."""
    joined = storage.join(labels_dir, GRAPHS_FILE)
    files = [joined] if storage.exists(joined) else []
    files += [f for c in corpora for f in sorted(glob.glob(os.path.join(c, "graphs", "*.parquet")))]
    index = {}
    for f in files:
        for row in pq.read_table(f).to_pylist():
            index.setdefault(tuple(row[k] for k in GRAPH_KEY), row)
    return index


def examples(labels: str, corpora: tuple[str, ...] = (), slugs: tuple[str, ...] = (),
             index: dict | None = None) -> tuple[list[dict], dict]:
    """Label rows (one per row x target) joined to graphs, with roofline and features.

    Args:
        labels: label directory (``<labels>/<device-slug>/labels.parquet``, ``graphs.parquet``).
        corpora: graph corpora whose ``graphs/<arch>@<res>.parquet`` rows join the labels.
        slugs: label device folders (empty: every folder; those whose device has no spec-table
            row, this project's own CPU VMs, have no roofline and are skipped).
        index: :func:`graph_index` of ``labels`` and ``corpora`` where the caller has it.

    Returns:
        (examples, counts): counts per ``slug/target`` of ok rows, rows with a graph, and rows
        whose graph key is missing.
    """
    index = graph_index(labels, corpora) if index is None else index
    out, counts, cache = [], {}, {}
    for slug in slugs or device_slugs(labels):
        rows = ok_labels(labels, slug).to_pylist()
        spec_slug = next((r["device_spec"] for r in rows if r.get("device_spec")), None)
        if not spec_slug:
            continue  # this project's own CPU rows: the VMs' peaks are unknown (no roofline)
        spec = devices.get(spec_slug)
        for target, mode in TARGET_MODES:
            have = [r for r in rows if r.get(target) and (r.get("gpus") or 1) == 1]
            joined, no_roof = 0, 0
            for r in have:
                r["precision"] = r.get("precision") or "fp32"
                g = index.get((r["arch"], r["resolution"], r["batch_size"]))
                if g is None or not same_model(r, g):
                    continue
                s = settings_of(r, target)
                key = (g["arch"], g["resolution"], g["batch_size"], spec.slug, r["precision"], mode,
                       optimizer_of(r), s["torch2"], s["compiled"])
                if key not in cache:
                    graph = row_to_graph(g)
                    found = roofline_features(graph, spec, r["precision"], mode, optimizer_of(r), s)
                    # the forward's kernels as the step model counts them: host time per kernel is per these
                    cache[key] = found and (*found, launches(graph, spec, r["precision"]))
                if cache[key] is None:  # e.g. no sourced FP64 peak: counted, reported once
                    if not no_roof:
                        log.warning("%s: no roofline for %s", slug, r["precision"])
                    no_roof += 1
                    continue
                floor, feats, kernels = cache[key]
                joined += 1
                out.append({"slug": slug, "spec": spec.slug, "kind": spec.kind, "target": target, "arch": r["arch"],
                            "family": r["family"], "measured": float(r[target]), "floor": floor, "rkey": key,
                            "launches": kernels,
                            "x": feature_vector(feats, spec, s), "setting": tuple(s[c] for c in SETTING_COLS)})
            counts[f"{slug}/{target}"] = {"ok_rows": len(have), "with_graph": joined, "no_roofline": no_roof,
                                          "without_graph": len(have) - joined - no_roof}
    return out, counts


__all__ = ["graph_index", "examples"]
