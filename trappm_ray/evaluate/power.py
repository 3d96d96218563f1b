"""The power model against Zeus's measurements: average GPU power at every (batch, power limit),
and how much a lower limit slows a step (``docs/results-power.md``).

Rows: Zeus's label rows (``data/labels-power``, :mod:`trappm_ray.labels.public_power`: ml-energy/zeus
@ 75a8b93, Apache-2.0): four training workloads on a P100, a Quadro RTX 6000 and a V100, one row per
(batch size, optimizer, power limit) with the time per iteration and the GPU's average power, each
with its joined graph: ShuffleNetV2 on CIFAR-100, torchvision's ResNet-50 on ImageNet, BERT-base on
Sentiment140 (classification, 128 tokens: the source's default) and on SQuAD (question answering,
384 tokens: assumed, not stated). Precision fp32 (assumed).

What the power model (:mod:`trappm_ray.physics.power`) is checked on:

* average power as the product answers it (the step model's busy share, no measured time), with
  the weight fitted on the other GPUs (leave one GPU out) or the other workloads (leave one
  workload out), the fit weighting each row by :func:`measured_busy`;
* the slowdown under a limit: the time per iteration at each limit over that at the GPU's
  highest limit, predicted by the step model's time at the clock the limit allows (the epoch's
  data loading, not in the step model, is taken as a constant share of the epoch).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.evaluate.campaign import BUSY_BATCH, ErrorSummary, campaign_rows, joined_graphs, row_setting
from trappm_ray.graph.featurize import Graph
from trappm_ray.labels.campaign_import import mean_train_power_w
from trappm_ray.labels.public_power import ZEUS
from trappm_ray.labels.store import device_slugs, source_rows
from trappm_ray.physics.power import PowerModel, answered_busy, fit, fit_voltage_floor, step_power
from trappm_ray.physics.step_model import StepEstimate, step_time

log = logging.getLogger(__name__)

LABELS = str(Path(__file__).resolve().parents[2] / "data" / "labels-power")  # jobs/import_labels.py --sources zeus
UNCAPPED = 0.97  # a row whose power is below this share of its limit ran at full clock
# Workloads whose data loader keeps up with the GPU (measured busy share 0.5-1 at every batch);
# ShuffleNetV2 on 32-px CIFAR images waits on it (0.1-0.5), which no graph shows.
GPU_BOUND = ("torchvision_resnet50", "bert_base_cls", "bert_base_qa")
BUSY_FOR_FLOOR = 0.9  # the measured busy share of the rows the voltage floor is fitted on
BAND_COVERAGE = 0.9  # a power answer's interval: 90% of a held-out GPU's rows


@dataclass(frozen=True)
class PowerRow:
    """One Zeus measurement (a label row of :mod:`trappm_ray.labels.public_power`).

    Attributes:
        step_ms: the epoch's time over its iterations (the data loader included).
    """

    gpu: str
    workload: str
    resolution: int
    batch: int
    optimizer: str
    limit_w: float
    step_ms: float
    power_w: float


def zeus_rows(labels_dir: str = LABELS) -> list[PowerRow]:
    """Zeus's ok rows in the label store ``labels_dir``."""
    return [PowerRow(r["device_spec"], r["arch"], r["resolution"], r["batch_size"], r["optimizer"], r["power_limit_w"],
                     r["train_step_ms"], r["power_w_mean"])
            for slug in device_slugs(labels_dir) for r in source_rows(labels_dir, slug, ZEUS.repo)]


def row_graphs(labels_dir: str, rows: list[PowerRow]) -> dict[tuple, Graph]:
    """The joined graphs of ``rows`` (``<labels_dir>/graphs.parquet``), by (workload, batch)."""
    found = joined_graphs(labels_dir, [{"arch": r.workload, "resolution": r.resolution, "batch_size": r.batch}
                                       for r in rows])
    return {(arch, batch): g for (arch, _, batch), g in found.items()}


def steps(rows: list[PowerRow], graphs: dict[tuple, Graph]) -> dict[tuple, StepEstimate]:
    """The step model per (GPU, workload, batch, optimizer) of ``rows`` (``graphs``: :func:`row_graphs`)."""
    out: dict[tuple, StepEstimate] = {}
    for r in rows:
        k = _key(r)
        if k not in out:
            out[k] = step_time(graphs[(r.workload, r.batch)], devices.get(r.gpu), {"precision": "fp32", "optimizer": r.optimizer})
    return out


def _key(r: PowerRow) -> tuple:
    return (r.gpu, r.workload, r.batch, r.optimizer)


def measured_busy(rows: list[PowerRow], stepped: dict) -> dict[tuple, float]:
    """Per row key, the share of a measured iteration the GPU worked at the rates the step model
    assumes: its device time over the epoch's time per iteration (at most 1). Below 1 the GPU
    either waited (Zeus's epochs include the data loader: ShuffleNetV2 on 32-px CIFAR images
    waits on it for most of a small-batch iteration, and draws near idle power) or ran its
    kernels at a lower rate than modelled (a P100 on BERT); both draw less dynamic power."""
    return {_key(r): answered_busy(stepped[_key(r)], r.step_ms) or 0.0 for r in rows}


def _fit_rows(rows: list[PowerRow], stepped: dict, busy: dict[tuple, float]) -> list:
    return [(stepped[_key(r)], devices.get(r.gpu), r.power_w, busy[_key(r)])
            for r in rows if r.power_w < UNCAPPED * r.limit_w]


def _tops(rows: list[PowerRow]) -> dict[tuple, PowerRow]:
    """Per setting, its row at the highest power limit measured (the slowdowns' reference)."""
    return {_key(r): r for r in sorted(rows, key=lambda r: r.limit_w)}


def _floor_rows(rows: list[PowerRow], stepped: dict) -> list:
    """The rows whose GPU was busy for (nearly) all of a measured iteration (:data:`BUSY_FOR_FLOOR`)
    under a lower limit than their setting's highest, with their measured slowdown
    (:func:`~trappm_ray.physics.power.fit_voltage_floor`): an epoch that also waits on its loader
    slows less than its kernels do, which would teach a floor too low."""
    top, busy = _tops(rows), measured_busy(rows, stepped)
    return [(stepped[_key(r)], devices.get(r.gpu), r.limit_w, top[_key(r)].limit_w, r.step_ms / top[_key(r)].step_ms)
            for r in rows if busy[_key(r)] >= BUSY_FOR_FLOOR and r.limit_w < top[_key(r)].limit_w]


def fitted(rows: list[PowerRow], stepped: dict) -> PowerModel:
    """The weight fitted on ``rows`` below their limit, then the voltage floor on their slowdowns."""
    return fit_voltage_floor(fit(_fit_rows(rows, stepped, measured_busy(rows, stepped))), _floor_rows(rows, stepped))


def held_out(rows: list[PowerRow], stepped: dict, by: str) -> list[dict]:
    """Every row answered as the product answers it (the step model's own busy share: it never
    sees the data loader), with the model fitted on the other groups (``by``: ``gpu`` or
    ``workload``; :func:`fitted`) and unfitted."""
    out = []
    measured = measured_busy(rows, stepped)
    for group in sorted({getattr(r, by) for r in rows}):
        model = fitted([r for r in rows if getattr(r, by) != group], stepped)
        log.info("held out %s: %.2f W per TFLOP/s, voltage floor %.2f", group, model.w_per_tflop, model.voltage_floor)
        test = [r for r in rows if getattr(r, by) == group]
        top = _tops(test)
        for r in test:
            spec, step = devices.get(r.gpu), stepped[_key(r)]
            est, plain = step_power(step, spec, model, r.limit_w), step_power(step, spec, PowerModel(), r.limit_w)
            full = step_power(step, spec, model, top[_key(r)].limit_w)
            out.append({"held_out": group, "gpu": r.gpu, "workload": r.workload, "batch": r.batch,
                        "optimizer": r.optimizer, "limit_w": r.limit_w, "measured_busy": measured[_key(r)],
                        "measured_w": r.power_w, "predicted_w": est.power_w, "unfitted_w": plain.power_w,
                        "clock": est.clock, "measured_slowdown": r.step_ms / top[_key(r)].step_ms,
                        "predicted_slowdown": est.step_ms / full.step_ms, "w_per_tflop": model.w_per_tflop,
                        "voltage_floor": model.voltage_floor})
    return out


def _errors(found: list[dict], key: str = "predicted_w") -> np.ndarray:
    return np.array([f[key] / f["measured_w"] - 1 for f in found]) if found else np.full(1, np.nan)


def summary(found: list[dict]) -> dict[str, dict]:
    """Per held-out group: power MAPE, worst and bias on every row and on the GPU-bound
    workloads, the unfitted model's MAPE, and the slowdown error."""
    by: dict[str, list[dict]] = defaultdict(list)
    for f in found:
        by[f["held_out"]].append(f)
    out = {}
    for g, fs in sorted(by.items()):
        err, bound = _errors(fs), _errors([f for f in fs if f["workload"] in GPU_BOUND])
        slow = np.array([f["predicted_slowdown"] / f["measured_slowdown"] - 1 for f in fs])
        bound_slow = np.array([f["predicted_slowdown"] / f["measured_slowdown"] - 1 for f in fs
                               if f["workload"] in GPU_BOUND] or [np.nan])
        out[g] = {"rows": len(fs), "power_mape": float(np.abs(err).mean() * 100),
                  "power_worst": float(np.abs(err).max() * 100), "power_bias": float(np.median(err) * 100),
                  "bound_mape": float(np.abs(bound).mean() * 100), "bound_worst": float(np.abs(bound).max() * 100),
                  "unfitted_mape": float(np.abs(_errors(fs, "unfitted_w")).mean() * 100),
                  "slowdown_mape": float(np.abs(slow).mean() * 100), "slowdown_worst": float(np.abs(slow).max() * 100),
                  "bound_slowdown_mape": float(np.abs(bound_slow).mean() * 100),
                  "bound_slowdown_worst": float(np.abs(bound_slow).max() * 100),
                  "bound_slowdown_within_10": float(np.mean(np.abs(bound_slow) <= 0.1) * 100),
                  "w_per_tflop": fs[0]["w_per_tflop"], "voltage_floor": fs[0]["voltage_floor"]}
    return out


def campaign(labels_dir: str, model: PowerModel) -> tuple[dict[str, dict], dict[str, np.ndarray]]:
    """The GPU campaign's training rows with a measured mean power (NVML's energy counter over the
    timed steps, :func:`~trappm_ray.labels.campaign_import.mean_train_power_w`) as a GPU none of
    ``model`` was fitted on: per precision, per model, every row and those at batch >= ``BUSY_BATCH``, the
    error of the answer as the product makes it (the step model's busy share), and with the
    measured step time as the busy share (what is left when the time is right); and per GPU
    every row's measured / answered power (:func:`band`)."""
    found: dict[str, list] = defaultdict(list)
    ratios: dict[str, list[float]] = defaultdict(list)
    for r, graph in campaign_rows(labels_dir, lambda r: mean_train_power_w(r) and r.get("train_step_ms")):
        spec = devices.get(r["device_spec"])
        step, watts = step_time(graph, spec, row_setting(r), "train"), mean_train_power_w(r) or np.nan
        busy, answer = answered_busy(step, r["train_step_ms"]), step_power(step, spec, model)
        clock = (answer.clock * spec.boost_clock_mhz / r["sm_clock_mhz"]
                 if r.get("sm_clock_mhz") and spec.boost_clock_mhz else np.nan)
        row = (answer.power_w / watts - 1, step_power(step, spec, model, busy=busy).power_w / watts - 1,
               f"{r['arch']}@{r['resolution']} b{r['batch_size']}", clock)
        ratios[spec.slug].append(1 / (1 + row[0]))
        for group in (r["precision"], "all", *(["all, batch >= 32"] if r["batch_size"] >= BUSY_BATCH else []),
                      f"model {r['arch']}"):
            found[f"{spec.slug} {group}"].append(row)
    return ({group: {**asdict(ErrorSummary.of([(e[0], e[2]) for e in errs])),
                     "timed_mape": float(np.mean([abs(e[1]) for e in errs]) * 100),
                     "clock_ratio": float(np.nanmedian(c)) if (c := [e[3] for e in errs if e[3] == e[3]]) else None,
                     "clock_rows": len(c)}
             for group, errs in sorted(found.items())}, {g: np.array(v) for g, v in ratios.items()})


def band(ratios: dict[str, np.ndarray], coverage: float = BAND_COVERAGE) -> tuple[float, float]:
    """(low, high) measured / answered power: the lowest of the GPUs' lower and the highest of
    their upper quantiles holding ``coverage`` of each GPU's held-out rows (half the miss on either
    side). A GPU's answers share a bias of their own (the H200's memory-bound steps draw less than
    a busy Volta's): the band must hold for the GPU that needed the widest, not for rows pooled."""
    tail = (1 - coverage) / 2
    groups = [v[np.isfinite(v)] for v in ratios.values()]
    groups = [v for v in groups if len(v)]  # a GPU of no checked row sets nothing
    if not groups:
        raise ValueError("no held-out row to set a power band on")
    return (float(min(np.quantile(v, tail) for v in groups)), float(max(np.quantile(v, 1 - tail) for v in groups)))


def band_checks(ratios: dict[str, np.ndarray]) -> dict[str, dict]:
    """Per GPU, the band from the other GPUs' rows and the share of its own rows inside it:
    whether an interval set without a GPU holds on it."""
    out = {}
    for gpu, own in ratios.items():
        lo, hi = band({g: v for g, v in ratios.items() if g != gpu})
        out[gpu] = {"rows": len(own), "band": [lo, hi], "coverage": float(np.mean((own >= lo) & (own <= hi)) * 100)}
    return out


def run(power_labels: str = LABELS, labels_dir: str | None = None) -> dict:
    """Leave-one-GPU-out and leave-one-workload-out, and the weights fitted on every uncapped
    row (``fitted``: what the product ships, with the leave-one-GPU-out 90th percentile error);
    the JSON ``jobs/evaluate_power.py`` writes."""
    rows = zeus_rows(power_labels)
    log.info("%d Zeus rows", len(rows))
    stepped = steps(rows, row_graphs(power_labels, rows))
    out: dict[str, dict] = {by: {"summary": summary(found := held_out(rows, stepped, by)), "rows": found}
                            for by in ("gpu", "workload")}
    model = fitted(rows, stepped)
    ratios = {g: 1 / (1 + _errors([f for f in out["gpu"]["rows"] if f["workload"] in GPU_BOUND and f["gpu"] == g]))
              for g in sorted({r.gpu for r in rows})}
    if labels_dir:
        out["campaign"], campaign_ratios = campaign(labels_dir, model)
        ratios.update(campaign_ratios)
    out["band"] = band_checks(ratios)
    out["fitted"] = {"w_per_tflop": model.w_per_tflop, "voltage_floor": model.voltage_floor, "band": list(band(ratios)),
                     "source": "ml-energy/zeus @ 75a8b93 (Apache-2.0), summary_power_{p100,rtx6000,v100}.csv: "
                               f"{sum(r.power_w < UNCAPPED * r.limit_w for r in rows)} rows below their power limit",
                     "command": "python jobs/evaluate_power.py"}
    return out


__all__ = ["LABELS", "PowerRow", "zeus_rows", "row_graphs", "steps", "fitted", "campaign", "held_out", "summary", "run"]
