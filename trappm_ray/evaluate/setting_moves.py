"""How far the step model's move between settings is off, where labels measured both settings.

A setting no label of a GPU holds (AdamW on the RTX 3090, bf16 anywhere) is answered as the
answer in a held setting times the physics step model's ratio between the two
(:class:`trappm_ray.model.compositions.SettingMove`). Its error is checked here on label pairs
that measured one model on one GPU at one batch in two precisions (ryujaehun's fp32 / fp16 /
fp64 runs of torchvision models on six GPUs): predicted ratio ``t(a) / t(b)`` against the
measured one. No part of the step model was fitted to these rows.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.featurize import Graph
from trappm_ray.evaluate.power import PowerRow
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.labels.examples import GRAPH_KEY
from trappm_ray.labels.store import device_slugs, ok_labels
from trappm_ray.physics.floors import time_floors_ms
from trappm_ray.physics.roofline import OPTIMIZER_BYTES
from trappm_ray.physics.step_model import MODES, step_time
from trappm_ray.train.gpu_examples import graph_index

log = logging.getLogger(__name__)

PAIR_KEY = ("device_spec", "arch", "resolution", "batch_size", "optimizer")


@dataclass
class MoveError:
    """One measured pair: the setting moved to, from, and the ratio errors per target."""

    device: str
    arch: str
    batch_size: int
    to: str
    frm: str
    target: str
    measured_ratio: float
    predicted_ratio: float
    floor_ratio: float  # the baseline: the ratio of the roofline / host floors

    @property
    def floor_error(self) -> float:
        return self.floor_ratio / self.measured_ratio - 1

    @property
    def error(self) -> float:
        return self.predicted_ratio / self.measured_ratio - 1


def _rows(labels_dir: str) -> list[dict]:
    out = []
    for slug in device_slugs(labels_dir):
        out += [r for r in ok_labels(labels_dir, slug).to_pylist() if r.get("device_spec") and r.get("precision")]
    return out


def pairs(labels_dir: str, targets=tuple(MODES)) -> list[MoveError]:
    """Every pair of label rows differing only in precision, with the step model's ratio."""
    index = graph_index(labels_dir, ())
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in _rows(labels_dir):
        groups[tuple(r.get(k) for k in PAIR_KEY)].setdefault(r["precision"], r)
    out = []
    for key, by_precision in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(by_precision) < 2:
            continue
        grow = index.get(tuple(next(iter(by_precision.values()))[k] for k in GRAPH_KEY))
        if grow is None:
            continue
        graph, spec = row_to_graph(grow), devices.get(key[0])
        precisions = sorted(by_precision)
        for i, a in enumerate(precisions):
            for b in precisions[i + 1:]:
                for t in targets:
                    ma, mb = by_precision[a].get(t), by_precision[b].get(t)
                    if not ma or not mb:
                        continue
                    opt = by_precision[a].get("optimizer") or "sgd-momentum"
                    try:
                        pa = step_time(graph, spec, {"precision": a, "optimizer": opt}, MODES[t]).total_ms
                        pb = step_time(graph, spec, {"precision": b, "optimizer": opt}, MODES[t]).total_ms
                        fa = time_floors_ms(graph, {}, a, opt, spec=spec)[t]
                        fb = time_floors_ms(graph, {}, b, opt, spec=spec)[t]
                    except (ValueError, KeyError):  # no sourced peak at one of the precisions
                        continue
                    out.append(MoveError(key[0], key[1], int(key[3]), a, b, t, ma / mb, pa / pb, fa / fb))
    return out


def summary(errors: list[MoveError]) -> dict[str, dict]:
    """Per move (``to<-from``) and target: rows, MAPE, median, worst, and the bias."""
    by: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in errors:
        by[f"{e.target} {e.to}/{e.frm}"].append((e.error, e.floor_error))
    out = {}
    for k, pairs_ in sorted(by.items()):
        v, f = np.array(pairs_).T
        out[k] = {"n": len(v), "mape": float(np.mean(np.abs(v)) * 100), "median": float(np.median(np.abs(v)) * 100),
                  "worst": float(np.max(np.abs(v)) * 100), "bias": float(np.median(v) * 100),
                  "floor_mape": float(np.mean(np.abs(f)) * 100)}
    return out


def optimizer_pairs(rows: list[PowerRow], graphs: dict[tuple, Graph]) -> list[MoveError]:
    """Zeus's rows that measured one workload on one GPU at one batch and power limit with two
    optimizers (:func:`trappm_ray.evaluate.power.zeus_rows`: the V100's ShuffleNetV2 with Adam
    and Adadelta), as moves of the step model between the two optimizers (fp32, the training
    step; the measured ratio is of times per iteration, data loading included; ``graphs``:
    :func:`trappm_ray.evaluate.power.row_graphs`)."""
    groups: dict[tuple, dict[str, PowerRow]] = defaultdict(dict)
    for r in rows:
        groups[(r.gpu, r.workload, r.batch, r.limit_w)][r.optimizer] = r
    out = []
    for (gpu, workload, batch, limit), by in sorted(groups.items()):
        if len(by) < 2 or limit != max(k[3] for k in groups if k[:3] == (gpu, workload, batch)):
            continue  # one pair per batch: at the highest limit (the clock unchanged)
        key = (workload, batch)
        spec = devices.get(gpu)
        a, b = sorted(by)
        ta = step_time(graphs[key], spec, {"precision": "fp32", "optimizer": a}).total_ms
        tb = step_time(graphs[key], spec, {"precision": "fp32", "optimizer": b}).total_ms
        fa = time_floors_ms(graphs[key], {}, "fp32", a if a in OPTIMIZER_BYTES else "adam", spec=spec)["train_step_ms"]
        fb = time_floors_ms(graphs[key], {}, "fp32", b if b in OPTIMIZER_BYTES else "adam", spec=spec)["train_step_ms"]
        out.append(MoveError(gpu, workload, batch, a, b, "train_step_ms",
                             by[a].step_ms / by[b].step_ms, ta / tb, fa / fb))
    return out


def run(labels_dir: str, zeus_rows: list[PowerRow] | None = None, zeus_graphs: dict[tuple, Graph] | None = None) -> dict:
    """The pairs and their summary, as ``jobs/evaluate_step_model.py`` writes them; with Zeus's
    rows (and their graphs) its optimizer pairs too."""
    found = pairs(labels_dir)
    if zeus_rows and zeus_graphs is not None:
        found += optimizer_pairs(zeus_rows, zeus_graphs)
    log.info("%d measured setting pairs", len(found))
    return {"summary": summary(found),
            "pairs": [{**asdict(e), "error": e.error, "floor_error": e.floor_error} for e in found]}


__all__ = ["MoveError", "pairs", "optimizer_pairs", "summary", "run"]
