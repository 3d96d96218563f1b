"""The power model against Zeus's measurements: average GPU power at every (batch, power limit),
and how much a lower limit slows a step (``docs/results-power.md``).

Source: ml-energy/zeus @ 75a8b93 (Apache-2.0; ``../shared/data/public-power/zeus``, SOURCES.md
there): six training workloads on a P100, a Quadro RTX 6000 and a V100, one row per (batch size,
optimizer, power limit) with the epoch time and the GPU's average power. Four workloads have a
graph here (``trappm_ray/corpus/workload_models.py``, torchvision's ResNet-50): ShuffleNetV2 on
CIFAR-100, ResNet-50 on ImageNet, BERT-base on Sentiment140 (classification, 128 tokens: the
source's default) and on SQuAD (question answering, 384 tokens: assumed, not stated);
DeepSpeech2 and NCF have no model code in the source and are left out. Precision fp32 (assumed).

What the power model (:mod:`trappm_ray.physics.power`) is checked on:

* average power given the measured time, with the activity weights fitted on the other GPUs
  (leave one GPU out) or the other workloads (leave one workload out), on every row
  (:func:`measured_busy`: the share of an iteration the GPU worked);
* the slowdown under a limit: the epoch time at each limit over the epoch time at the GPU's
  highest limit, predicted by the step model's time at the clock the limit allows (the epoch's
  data loading, not in the step model, is taken as a constant share of the epoch).
"""
from __future__ import annotations

import csv
import logging
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.power import PowerModel, fit, step_power
from trappm_ray.physics.step_model import StepEstimate, step_time

log = logging.getLogger(__name__)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "public-power" / "zeus"
GPUS = {"p100": "p100-pcie-16gb", "rtx6000": "quadro-rtx-6000", "v100": "v100-pcie-32gb"}
# (dataset, network) -> (workload graph, input dims)
WORKLOADS = {("cifar100", "shufflenetv2"): ("cifar_shufflenetv2", {}), ("imagenet", "resnet50"): ("resnet50", {}),
             ("sentiment140", "bert_base_uncased"): ("bert_base_cls", {"seq": 128}),
             ("squad", "bert_base_uncased"): ("bert_base_qa", {"seq": 384})}
UNCAPPED = 0.97  # a row whose power is below this share of its limit ran at full clock
# Training samples per epoch (SOURCES.md): CIFAR-100's and ILSVRC-2012's training splits, a
# Capriccio slice (425,000: with Sentiment140's 1,600,000 the step model, a near-bound, would read
# 1.8-3.7x slower than the measured iterations; with 425,000 it reads 0.5-1.0x, as on the other
# workloads), SQuAD v1.1's questions (long contexts split into more features are not counted).
SAMPLES = {"cifar_shufflenetv2": 50_000, "resnet50": 1_281_167, "bert_base_cls": 425_000, "bert_base_qa": 87_599}


@dataclass
class PowerRow:
    """One Zeus measurement."""

    gpu: str
    workload: str
    batch: int
    optimizer: str
    limit_w: float
    epoch_s: float
    power_w: float


def zeus_rows(root: Path = DATA) -> list[PowerRow]:
    """Zeus's rows of the workloads with a graph here."""
    out = []
    for gpu, slug in GPUS.items():
        with open(root / f"summary_power_{gpu}.csv", newline="") as fh:
            for r in csv.DictReader(fh):
                w = WORKLOADS.get((r["dataset"], r["network"]))
                if w is not None:
                    out.append(PowerRow(slug, w[0], int(r["batch_size"]), r["optimizer"], float(r["power_limit"]),
                                        float(r["time_per_epoch"]), float(r["average_power"])))
    return out


def steps(rows: list[PowerRow], onnx_of) -> dict[tuple, StepEstimate]:
    """The step model per (GPU, workload, batch, optimizer) of ``rows`` (``onnx_of``: workload ->
    ONNX bytes), each graph featurized once."""
    dims = {w: d for w, d in WORKLOADS.values()}
    out: dict[tuple, StepEstimate] = {}
    for key in sorted({(r.workload, r.batch) for r in rows}):
        graph = featurize(onnx_of(key[0]), key[1], dims=dims[key[0]] or None)
        for r in rows:
            k = (r.gpu, r.workload, r.batch, r.optimizer)
            if (r.workload, r.batch) == key and k not in out:
                out[k] = step_time(graph, devices.get(r.gpu), {"precision": "fp32", "optimizer": r.optimizer})
    return out


def _key(r: PowerRow) -> tuple:
    return (r.gpu, r.workload, r.batch, r.optimizer)


def measured_busy(rows: list[PowerRow], stepped: dict) -> dict[tuple, float]:
    """Per row key, the share of a measured iteration the GPU worked at the rates the step model
    assumes: its device time over the epoch's time per iteration (at most 1). Below 1 the GPU
    either waited (Zeus's epochs include the data loader: ShuffleNetV2 on 32-px CIFAR images
    waits on it for most of a small-batch iteration, and draws near idle power) or ran its
    kernels at a lower rate than modelled (a P100 on BERT); both draw less dynamic power."""
    return {_key(r): min(stepped[_key(r)].device_ms / (r.epoch_s * 1e3 / math.ceil(SAMPLES[r.workload] / r.batch)), 1.0)
            for r in rows}


def _fit_rows(rows: list[PowerRow], stepped: dict, busy: dict[tuple, float]) -> list:
    return [(stepped[_key(r)], devices.get(r.gpu), r.power_w, busy[_key(r)])
            for r in rows if r.power_w < UNCAPPED * r.limit_w]


def held_out(rows: list[PowerRow], stepped: dict, by: str) -> list[dict]:
    """Every row predicted with the weights fitted on the uncapped rows of the other groups
    (``by``: ``gpu`` or ``workload``), and with the unfitted defaults."""
    out = []
    measured = measured_busy(rows, stepped)
    for group in sorted({getattr(r, by) for r in rows}):
        model = fit(_fit_rows([r for r in rows if getattr(r, by) != group], stepped, measured))
        test = [r for r in rows if getattr(r, by) == group]
        top = {(r.gpu, r.workload, r.batch, r.optimizer): r for r in sorted(test, key=lambda r: r.limit_w)}
        for r in test:
            spec = devices.get(r.gpu)
            busy = measured[_key(r)]
            est, plain = (step_power(stepped[_key(r)], spec, m, r.limit_w, busy) for m in (model, PowerModel()))
            ref = top[_key(r)]
            full = step_power(stepped[_key(r)], spec, model, ref.limit_w, busy)
            out.append({"held_out": group, "gpu": r.gpu, "workload": r.workload, "batch": r.batch,
                        "optimizer": r.optimizer, "limit_w": r.limit_w, "busy": busy, "measured_w": r.power_w,
                        "predicted_w": est.power_w, "unfitted_w": plain.power_w, "clock": est.clock,
                        "measured_slowdown": r.epoch_s / ref.epoch_s, "predicted_slowdown": est.step_ms / full.step_ms,
                        "weights": [model.k0, model.kc, model.km]})
    return out


def summary(found: list[dict]) -> dict[str, dict]:
    """Per held-out group: power MAPE (fitted and unfitted weights), worst, and the slowdown error."""
    by: dict[str, list[dict]] = defaultdict(list)
    for f in found:
        by[f["held_out"]].append(f)
    out = {}
    for g, fs in sorted(by.items()):
        err = np.array([f["predicted_w"] / f["measured_w"] - 1 for f in fs])
        plain = np.array([f["unfitted_w"] / f["measured_w"] - 1 for f in fs])
        slow = np.array([f["predicted_slowdown"] / f["measured_slowdown"] - 1 for f in fs])
        out[g] = {"rows": len(fs), "power_mape": float(np.abs(err).mean() * 100),
                  "power_worst": float(np.abs(err).max() * 100), "power_bias": float(np.median(err) * 100),
                  "unfitted_mape": float(np.abs(plain).mean() * 100),
                  "slowdown_mape": float(np.abs(slow).mean() * 100), "slowdown_worst": float(np.abs(slow).max() * 100),
                  "weights": fs[0]["weights"]}
    return out


def run(onnx_of, root: Path = DATA) -> dict:
    """Leave-one-GPU-out and leave-one-workload-out, and the weights fitted on every uncapped
    row (``fitted``: what the product ships, with the leave-one-GPU-out 90th percentile error);
    the JSON ``jobs/evaluate_power.py`` writes."""
    rows = zeus_rows(root)
    log.info("%d Zeus rows with a graph", len(rows))
    stepped = steps(rows, onnx_of)
    out: dict[str, dict] = {by: {"summary": summary(found := held_out(rows, stepped, by)), "rows": found}
                            for by in ("gpu", "workload")}
    model = fit(_fit_rows(rows, stepped, measured_busy(rows, stepped)))
    errors = [abs(f["predicted_w"] / f["measured_w"] - 1) for f in out["gpu"]["rows"]]
    out["fitted"] = {"weights": {"k0": model.k0, "kc": model.kc, "km": model.km},
                     "error_p90": float(np.quantile(errors, 0.9)),
                     "source": "ml-energy/zeus @ 75a8b93 (Apache-2.0), summary_power_{p100,rtx6000,v100}.csv: "
                               f"{sum(r.power_w < UNCAPPED * r.limit_w for r in rows)} rows below their power limit",
                     "command": "python jobs/evaluate_power.py"}
    return out


def markdown(result: dict, seconds: float) -> str:
    """``docs/results-power.md`` from :func:`run`'s result."""
    lines = ["# Power: the physics power model against Zeus's measurements", "",
             f"Generated by `python jobs/evaluate_power.py` in {seconds:.0f} s (numbers in `docs/results-power.json`; "
             "model: `trappm_ray/physics/power.py`; rows: `trappm_ray/evaluate/power.py`). Each row is one Zeus "
             "measurement (workload, batch, optimizer, power limit) on a P100, a Quadro RTX 6000 or a V100; the "
             "power model's three activity weights are fitted on the other GPUs' (or workloads') rows that ran "
             "below their limit, and predict every row of the held-out one. 'Unfitted' uses the physics "
             "defaults (no label at all). The slowdown is the epoch time at a limit over the epoch time at the "
             "GPU's highest limit.", ""]
    for by, title in (("gpu", "Leave one GPU out"), ("workload", "Leave one workload out")):
        lines += [f"## {title}", "", "| held out | rows | power MAPE | worst | median signed | unfitted MAPE | "
                  "slowdown MAPE | slowdown worst | weights k0 / kc / km |", "|---|---|---|---|---|---|---|---|---|"]
        for g, v in result[by]["summary"].items():
            lines.append(f"| {g} | {v['rows']} | {v['power_mape']:.1f}% | {v['power_worst']:.0f}% | "
                         f"{v['power_bias']:+.1f}% | {v['unfitted_mape']:.1f}% | {v['slowdown_mape']:.1f}% | "
                         f"{v['slowdown_worst']:.0f}% | {' / '.join(f'{w:.2f}' for w in v['weights'])} |")
        lines.append("")
    f = result["fitted"]
    lines += ["## What ships", "",
              f"Weights fitted on every row below its limit: k0 {f['weights']['k0']:.3f}, kc {f['weights']['kc']:.3f}, "
              f"km {f['weights']['km']:.3f} (`trappm_ray/data/power_model.json`). A power answer's interval is "
              f"+-{100 * f['error_p90']:.0f}%, the 90th percentile of the leave-one-GPU-out error.", "",
              "Each row's activity is the share of its measured iteration the GPU worked at the rates the step "
              "model assumes (the model's device time over the epoch's time per iteration, at most 1; training "
              "set sizes in `SAMPLES`): Zeus's epochs include the data loader, and a GPU that waits on it draws "
              "near idle power. The product has no measured time: it takes the step model's own share (host "
              "issue time against device time).", "",
              "What limits it: the three GPUs reach different shares of their TDP on the same device-bound work "
              "(ResNet-50 and BERT at their highest limit: P100 about 0.65, V100 and RTX 6000 about 0.9), which "
              "no shared weight explains and three GPUs cannot teach; the compute weight fits to 0 (on these "
              "rows power follows being busy and memory traffic, not compute saturation), where an H200 read "
              "on a lent slot says otherwise for saturating kernels: a bf16 GEMM reaches the 700 W cap at 74% "
              "clock, a memory copy draws 472 W (`data/measurements/h200-2026-11-27/`); idle power is taken "
              "as 12% of TDP for these GPUs (not measured here; the H200 idles at 78 W, 11%); precision is "
              "assumed fp32.", ""]
    return "\n".join(lines)


__all__ = ["DATA", "GPUS", "WORKLOADS", "PowerRow", "zeus_rows", "steps", "held_out", "summary", "run", "markdown"]
