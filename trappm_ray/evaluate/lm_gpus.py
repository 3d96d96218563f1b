"""Transformer LMs on GPUs left out: NeuSight's protocol on the labels here.

NeuSight (Lee et al., "Forecasting GPU Performance for Deep Learning Training and Inference",
ASPLOS 2025) predicts each GEMM from its tiles and waves and each elementwise or normalization op
from the bandwidth, and reports 7.1% (training) and 9.2% (inference) mean error on GPUs its
predictor never saw (H100, L4, A100 80 GB PCIe). Its public measurements of six LMs on nine GPUs
(``sitar-lab/NeuSight``, imported as label rows) are checked here two ways, per GPU and target:

* the physics step model (:mod:`trappm_ray.physics.step_model`: per kernel, tiles and waves of
  GEMMs with split-K, bandwidth-bound vector ops, host issue time), which has no learned part, so
  every GPU is one it never saw;
* the spec-based predictor, each GPU predicted by its fit on all other GPUs (the leave-one-device-
  out figures its manifest stores, ``boosters.lodo``: the same rows, as every row of these GPUs is
  an LM's).

Besides the absolute error, batch scaling alone: ``t(b) / t(b_max)`` within each (model, GPU,
sequence length, target) NeuSight measured at several batches (1-16).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.labels.examples import GRAPH_KEY
from trappm_ray.labels.public_rows import NEUSIGHT
from trappm_ray.labels.store import device_slugs, source_rows
from trappm_ray.model.device_features import settings_of
from trappm_ray.physics.step_model import MODES, step_time
from trappm_ray.train.gpu_examples import graph_index

log = logging.getLogger(__name__)

# NeuSight's published mean error on its held-out GPUs (its paper's abstract), per target
PUBLISHED = {"train_step_ms": 7.1, "inference_ms": 9.2}


@dataclass(frozen=True)
class LmPoint:
    """One measured time of an LM on one GPU and the step model's answer (ms)."""

    device: str
    arch: str
    seq: int
    batch: int
    target: str
    measured_ms: float
    step_ms: float

    @property
    def error(self) -> float:
        return self.step_ms / self.measured_ms - 1


def lm_points(labels_dir: str) -> list[LmPoint]:
    """NeuSight's one-GPU rows joined to their graphs, each target the step model answered in the
    row's setting (fp32, no optimizer step, attention as the row's torch version runs it)."""
    index = graph_index(labels_dir, ())
    out = []
    for slug in device_slugs(labels_dir):
        for r in source_rows(labels_dir, slug, NEUSIGHT.repo):
            grow = index.get(tuple(r[k] for k in GRAPH_KEY))
            if (r.get("gpus") or 1) > 1 or grow is None:
                continue
            graph, spec = row_to_graph(grow), devices.get(r["device_spec"])
            for target, mode in MODES.items():
                if not r.get(target):
                    continue
                setting = {"precision": r["precision"], "optimizer": r.get("optimizer") or "none"}
                fused = bool(settings_of(r, target)["torch2"])
                est = step_time(graph, spec, setting, mode, fused_attention=fused)
                out.append(LmPoint(r["device_spec"], r["arch"], int(r["resolution"]), int(r["batch_size"]),
                                   target, float(r[target]), est.total_ms))
    log.info("%d NeuSight LM points", len(out))
    return out


def _stats(errors: list[float]) -> dict:
    e = np.abs(np.asarray(errors))
    return {"n": int(e.size), "mape": float(e.mean() * 100), "worst": float(e.max() * 100),
            "bias": float(np.median(errors) * 100)}


def sweeps(points: list[LmPoint]) -> list[dict]:
    """Per (GPU, model, sequence length, target) measured at two or more batches: the step
    model's error of ``t(b) / t(b_max)`` at each smaller batch (repeated measurements averaged)."""
    groups: dict[tuple, dict[int, list[LmPoint]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        groups[(p.device, p.arch, p.seq, p.target)][p.batch].append(p)
    out = []
    for (device, arch, seq, target), by in sorted(groups.items()):
        if len(by) < 2:
            continue
        batches = sorted(by)
        meas = np.array([np.mean([p.measured_ms for p in by[b]]) for b in batches])
        pred = np.array([by[b][0].step_ms for b in batches])
        errs = (pred / pred[-1]) / (meas / meas[-1]) - 1
        out.append({"device": device, "arch": arch, "seq": seq, "target": target, "batches": batches,
                    "measured_ms": meas.tolist(), "step_ms": pred.tolist(), "ratio_error": errs[:-1].tolist()})
    return out


def summary(points: list[LmPoint], found_sweeps: list[dict], lodo: dict) -> dict[str, dict]:
    """Per target and GPU: the step model's absolute and batch-ratio errors and the spec-based
    predictor's leave-one-device-out MAPE (``lodo``: its manifest's ``boosters.lodo``); ``mean``
    each over GPUs, as NeuSight reports it; ``published`` NeuSight's figure."""
    out: dict[str, dict] = {}
    for target in MODES:
        per: dict[str, dict] = {}
        for device in sorted({p.device for p in points if p.target == target}):
            mine = [p for p in points if p.target == target and p.device == device]
            ratios = [e for s in found_sweeps if s["target"] == target and s["device"] == device
                      for e in s["ratio_error"]]
            spec = lodo.get(target, {}).get("devices", {}).get(device, {})
            per[device] = {"step": _stats([p.error for p in mine]),
                           "ratio": _stats(ratios) if ratios else None, "spec_lodo": spec.get("mape"),
                           "spec_lodo_rows": spec.get("rows")}
        found = {"step": [v["step"]["mape"] for v in per.values()],
                 "ratio": [v["ratio"]["mape"] for v in per.values() if v["ratio"]],
                 "spec_lodo": [v["spec_lodo"] for v in per.values() if v["spec_lodo"] is not None]}
        out[target] = {"devices": per, "mean": {k: float(np.mean(v)) if v else None for k, v in found.items()},
                       "published": PUBLISHED[target]}
    return out


def run(labels_dir: str, lodo: dict) -> dict:
    """The points, sweeps and summary, as ``jobs/evaluate_step_model.py`` writes them."""
    points = lm_points(labels_dir)
    found = sweeps(points)
    return {"summary": summary(points, found, lodo), "sweeps": found,
            "points": [{**asdict(p), "error": p.error} for p in points]}


__all__ = ["PUBLISHED", "LmPoint", "lm_points", "sweeps", "summary", "run"]
