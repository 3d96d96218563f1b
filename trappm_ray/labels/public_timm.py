"""Reader of timm's benchmark CSVs (``results/benchmark-*.csv`` of huggingface/pytorch-image-models).

A file name says what was measured:
``benchmark-{train|infer}-{precision}-{nchw|nhwc}-pt{torch}-{cu<CUDA>|cpu}-{device}[-dynamo].csv``;
each row is one model at one batch size and resolution, with the mean step time over the timed
steps (``{mode}_step_time``, ms). There is one number per model and file, so the spread of a label
row made from several files (torch versions) is the spread between those versions.
"""
from __future__ import annotations

import logging
import os
import re

import pandas as pd

from trappm_ray.labels.public_rows import TIMM, measurement

log = logging.getLogger(__name__)

_NAME = re.compile(r"benchmark-(?P<mode>train|infer)-(?P<prec>[a-z0-9]+)-(?P<fmt>nchw|nhwc)-"
                   r"pt(?P<pt>\d+)-(?P<cu>cu\d+|cpu)-(?P<dev>.+?)(?P<dyn>-dynamo)?\.csv$")
_MODEL = re.compile(r"^[a-z0-9_]+$")  # timm model names: lower case, digits, underscores
# Device tokens of the file names -> GPU/CPU slug of data/devices.csv.
DEVICES = {"rtx3090": "rtx3090", "rtx4090": "rtx4090", "4090": "rtx4090", "i9_10940x": "i9-10940x"}
PRECISIONS = {"amp": "amp-fp16", "fp32": "fp32", "fp16": "fp16", "bf16": "amp-bf16",
              "ampbf16": "amp-bf16"}
WARMUP, STEPS = 10, 50
# timm's benchmark builds its "sgd" optimizer through create_optimizer_v2: SGD with momentum 0.9
# (Nesterov), one momentum buffer per parameter; inference rows carry the device's training setting.
OPTIMIZER = "sgd-momentum"
METHOD = {
    "train": "timm benchmark.py, train: random inputs and targets, zero_grad + forward + cross-entropy + "
             "backward + SGD (momentum 0.9) step, 10 warm-up + 50 timed steps, wall time synchronised with the "
             "device, averaged over the timed steps (ms per step), batch started at 256/512 and was "
             "reduced on out-of-memory until a run fitted",
    "infer": "timm benchmark.py, inference: eval mode, no_grad, forward on random inputs, 10 "
             "warm-up + 50 timed steps, synchronised wall time averaged over the timed steps",
}


def torch_version(token: str) -> str:
    """``112`` -> ``1.12``, ``240`` -> ``2.4.0`` (the digits of timm's ``pt`` file-name token)."""
    return f"1.{token[1:]}" if token[0] == "1" else f"{token[0]}.{token[1]}.{token[2:]}"


def cuda_version(token: str) -> str | None:
    """``cu113`` -> ``11.3``; ``cpu`` -> None."""
    return None if token == "cpu" else f"{token[2:4]}.{token[4:]}"


def _number(value):
    """A float, or None for blanks and text."""
    v = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(v) else float(v)


def read_file(path: str, source_file: str) -> tuple[list[dict], list[str]]:
    """Measurements of one timm benchmark CSV.

    Args:
        path: the file on disk.
        source_file: its path inside the source repository (provenance).

    Returns:
        (measurements, issues): rows for :func:`trappm_ray.labels.public.summarise`, and why
        the file (or a row of it) could not be used.
    """
    m = _NAME.match(os.path.basename(path))
    if not m:
        return [], [f"{source_file}: file name not understood, skipped"]
    mode, dev = m["mode"], m["dev"]
    if dev not in DEVICES or m["prec"] not in PRECISIONS:
        return [], [f"{source_file}: unknown device {dev!r} or precision {m['prec']!r}, skipped"]
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        return [], [f"{source_file}: unreadable ({type(e).__name__}: {e}), skipped"]
    needed = ["model", f"{mode}_step_time", f"{mode}_batch_size", f"{mode}_img_size"]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        return [], [f"{source_file}: columns {missing} missing, skipped"]
    label = "train_step_ms" if mode == "train" else "inference_ms"
    common = dict(device_spec=DEVICES[dev], precision=PRECISIONS[m["prec"]],
                  memory_format=m["fmt"], gpus=1, parallelism="single",
                  compiled="dynamo" if m["dyn"] else "none", optimizer=OPTIMIZER,
                  model_source="timm", torch_version=torch_version(m["pt"]),
                  cuda=cuda_version(m["cu"]), source_file=source_file, method=METHOD[mode],
                  warmup=WARMUP, steps=STEPS)
    out, issues = [], []
    for i, r in enumerate(table.to_dict("records")):
        name = (r.get("model") or "").strip()
        if not name:
            issues.append(f"{source_file}: row {i + 2} has no model name, skipped")
            continue
        batch, res = _number(r[f"{mode}_batch_size"]), _number(r[f"{mode}_img_size"])
        error = None
        if not _MODEL.match(name):
            error = f"unknown model name {name!r}"
        elif batch is None or batch < 1 or res is None or res < 1:
            error = f"batch size {r[f'{mode}_batch_size']!r} or image size {r[f'{mode}_img_size']!r} missing"
        params = _number(r.get("param_count"))
        cols = dict(common, arch=name, family=_family(name),
                    resolution=int(res) if res and res >= 1 else None,
                    batch_size=int(batch) if batch and batch >= 1 else None,
                    params=int(round(params * 1e6)) if params is not None else None,
                    gmacs=_number(r.get("infer_gmacs")), macts=_number(r.get("infer_macts")),
                    **{f"{'train' if mode == 'train' else 'inference'}_samples_per_s":
                       _number(r.get(f"{mode}_samples_per_sec"))})
        cols["train_steps_timed" if mode == "train" else "inference_steps_timed"] = STEPS
        spec = cols.pop("device_spec")
        prec = cols.pop("precision")
        out.append(measurement(TIMM, spec, prec, label, r[f"{mode}_step_time"], error=error, **cols))
    return out, issues


def _family(name: str) -> str:
    from trappm_ray.corpus.zoo import family_of

    return family_of(name)


def read(folder: str) -> tuple[list[dict], list[str]]:
    """Measurements of every ``benchmark-*.csv`` under ``folder`` (timm's ``results/``)."""
    out, issues = [], []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".csv"):
            continue
        found, bad = read_file(os.path.join(folder, name), f"results/{name}")
        log.debug("%s: %d measurements", name, len(found))
        out += found
        issues += bad
    return out, issues


__all__ = ["DEVICES", "PRECISIONS", "METHOD", "torch_version", "cuda_version", "read_file", "read"]
