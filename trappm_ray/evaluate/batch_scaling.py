"""Batch scaling checked against public measured sweeps: one model, one GPU, several batch sizes.

Sources: the one-GPU label rows of ``data/labels-distributed`` (imported by
:mod:`trappm_ray.labels.public_distributed`, with their provenance):

* Pollux (petuum/adaptdl @ de25dcc, Apache-2.0): placement ``1``: ResNet-50 at 224 px, the CIFAR
  ResNet-18, BERT-base with a question-answering head at 384 tokens, on a T4 (AWS g4dn, stated by
  the Pollux paper); seconds per iteration.
* Gavel (stanford-futuredata/gavel @ c4fa400, MIT): the jobs alone on one K80 or P100
  (iterations/s, inverted): ResNet-18 (CIFAR), ResNet-50, Transformer, LSTM LM, Recommendation.

For each sweep the metric is the error of ``t(b) / t(b_ref)`` (``b_ref`` the sweep's largest
batch): batch scaling alone, free of the level a learned model sets; the absolute error of the
physics alone is reported beside it. Neither source states its precision: fp32 is assumed (both
predate AMP in their code); the optimizer is the one the workload's code uses.
Baselines from the same run: the roofline floor's ratio, and time proportional to the batch;
beside them the product's answer (``trappm_ray.predict``), which neither source trained.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.labels.public_distributed import GAVEL, POLLUX
from trappm_ray.labels.store import source_rows
from trappm_ray.physics.floors import time_floors_ms
from trappm_ray.physics.step_model import Setting, step_time

log = logging.getLogger(__name__)

LABELS = Path(__file__).resolve().parents[2] / "data" / "labels-distributed"  # jobs/import_labels.py
# workload -> (how its graph is made, input dims, optimizer its code uses)
WORKLOADS = {
    "resnet50": ("torchvision:torchvision_resnet50@224", {}, "sgd-momentum"),
    "cifar_resnet18": ("workload:cifar_resnet18", {}, "sgd-momentum"),
    "transformer_mt": ("workload:transformer_mt", {}, "adam"),
    "lstm_lm": ("workload:lstm_lm", {}, "sgd"),
    "recoder_ae": ("workload:recoder_ae", {}, "adam"),
    "cifar_shufflenetv2": ("workload:cifar_shufflenetv2", {}, "adadelta"),
    "bert_base_cls": ("workload:bert_base_cls", {"seq": 128}, "adamw"),
    "bert_base_qa": ("workload:bert_base_qa", {"seq": 384}, "adamw"),
}
GAVEL_DEVICES = {"k80": "k80", "p100": "p100-pcie-16gb"}
WORKLOAD_OF = {"torchvision_resnet50": "resnet50"}  # a label row's arch -> its WORKLOADS name, where they differ


@dataclass(frozen=True)
class Sweep:
    """Measured step times of one workload on one GPU at several batch sizes."""

    source: str
    workload: str
    device: str
    batches: tuple[int, ...]
    measured_ms: tuple[float, ...]
    precision: str = "fp32"


def one_gpu_sweeps(labels: Path = LABELS) -> list[Sweep]:
    """Pollux's (on the T4) and Gavel's (on a K80 or a P100) one-GPU label rows, one sweep per
    source, workload and GPU, batches ascending."""
    folders = [("pollux", POLLUX.repo, "t4")] + [("gavel", GAVEL.repo, slug) for slug in GAVEL_DEVICES.values()]
    out = []
    for source, repo, slug in folders:
        found: dict[str, list] = defaultdict(list)
        for r in source_rows(str(labels), f"{slug}-fp32", repo):
            if r["gpus"] == 1:
                found[WORKLOAD_OF.get(r["arch"], r["arch"])].append((r["batch_size"], r["train_step_ms"]))
        for workload, pts in sorted(found.items()):
            pts.sort()
            out.append(Sweep(source, workload, slug, tuple(b for b, _ in pts), tuple(t for _, t in pts)))
    return out


def workload_onnx(workload: str, cache: Path) -> bytes:
    """The workload's ONNX export (weights stripped), made once into ``cache``."""
    path = cache / f"{workload}.onnx"
    if path.exists():
        return path.read_bytes()
    how = WORKLOADS[workload][0]
    kind, _, name = how.partition(":")
    if kind == "torchvision":
        from trappm_ray.corpus.torchvision_models import export_torchvision
        arch, _, res = name.partition("@")
        data = export_torchvision(arch, int(res))[0]
    elif kind == "text":
        from trappm_ray.corpus.text_models import export_text_model
        data = export_text_model(name)[0]
    else:
        from trappm_ray.corpus.workload_models import export
        data = export(name)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


@dataclass
class SweepResult:
    """One sweep's predicted and measured ratios to its largest batch, and absolute times."""

    source: str
    workload: str
    device: str
    batches: list[int]
    measured_ms: list[float]
    step_ms: list[float]
    ratio_error: list[float]
    floor_ratio_error: list[float]
    linear_ratio_error: list[float]
    absolute_error: list[float]
    product_ms: list[float]
    product_ratio_error: list[float]
    product_absolute_error: list[float]


def ratio_errors(pred: np.ndarray, meas: np.ndarray) -> list[float]:
    """Error of t(b) / t(b_largest), predicted over measured, at each batch but the largest."""
    r_pred, r_meas = pred / pred[-1], meas / meas[-1]
    return [float(x) for x in (r_pred / r_meas - 1)[:-1]]


def evaluate_sweep(sweep: Sweep, cache: Path, answer=None) -> SweepResult:
    """The step model (and the baselines) at each batch of ``sweep``; with ``answer`` (``(onnx
    bytes, batch, dims, device, precision, optimizer) -> ms``: the product's prediction) its
    answers too."""
    onnx_bytes = workload_onnx(sweep.workload, cache)
    _, dims, optimizer = WORKLOADS[sweep.workload]
    spec = devices.get(sweep.device)
    setting = Setting(precision=sweep.precision, optimizer=optimizer)
    step, floor = [], []
    for b in sweep.batches:
        g = featurize(onnx_bytes, b, dims=dims or None)
        step.append(step_time(g, spec, setting).total_ms)
        floor.append(time_floors_ms(g, {}, sweep.precision, optimizer, spec=spec)["train_step_ms"])
    meas, step_a = np.array(sweep.measured_ms), np.array(step)
    product = [answer(onnx_bytes, b, dims, sweep.device, sweep.precision, optimizer) for b in sweep.batches] \
        if answer else []
    prod_a = np.array(product)
    return SweepResult(sweep.source, sweep.workload, sweep.device, list(sweep.batches), list(sweep.measured_ms),
                       step, ratio_errors(step_a, meas), ratio_errors(np.array(floor), meas),
                       ratio_errors(np.array(sweep.batches, float), meas),
                       [float(x) for x in step_a / meas - 1], product,
                       ratio_errors(prod_a, meas) if product else [],
                       [float(x) for x in prod_a / meas - 1] if product else [])


def summary(results: list[SweepResult]) -> dict[str, dict]:
    """Per source: MAPE and worst error of the ratios (step model and baselines) and absolute."""
    out: dict[str, dict] = {}
    for source in sorted({r.source for r in results}):
        rs = [r for r in results if r.source == source]
        cols = {}
        for name in ("ratio_error", "floor_ratio_error", "linear_ratio_error", "absolute_error",
                     "product_ratio_error", "product_absolute_error"):
            errs = np.abs(np.concatenate([getattr(r, name) for r in rs]))
            errs = errs[np.isfinite(errs)]  # a batch the product refuses
            if errs.size:
                cols[name] = {"mape": float(errs.mean() * 100), "worst": float(errs.max() * 100), "n": int(errs.size)}
        out[source] = cols
    return out


def run(sweeps: list[Sweep], cache: Path, answer=None) -> dict:
    """Every sweep evaluated (``answer``: see :func:`evaluate_sweep`); the JSON that
    ``jobs/evaluate_step_model.py`` writes."""
    results = []
    for s in sweeps:
        log.info("%s %s on %s: batches %s", s.source, s.workload, s.device, s.batches)
        results.append(evaluate_sweep(s, cache, answer))
    return {"summary": summary(results), "sweeps": [asdict(r) for r in results]}


__all__ = ["LABELS", "WORKLOADS", "WORKLOAD_OF", "Sweep", "SweepResult", "one_gpu_sweeps", "workload_onnx",
           "ratio_errors", "evaluate_sweep", "summary", "run"]
