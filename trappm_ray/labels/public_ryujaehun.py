"""Reader of ryujaehun/pytorch-gpu-benchmark's per-iteration times (``results/``, ``new_results/``).

One CSV per (GPU, GPU count, precision, train|inference): a column per torchvision model, a row per
timed iteration (ms). Two name forms: ``<GPU>_<n>_gpus__<float|half|double>_model_<train|
training|inference>_benchmark.csv`` (50 iterations, 32 models) and the older
``<GPU>_<single|half|double>_model_<training|inference>_benchmark[(<run>)].csv`` (20 iterations,
15 models, one GPU). A folder's ``config.json`` gives warm-up, timed steps and batch size and its
``system_info.txt`` the CUDA version and date; folders without them are taken at the benchmark's
defaults (batch 12, 5 warm-up steps). Identical copies of a file (``new_results/`` repeats
``results/2080ti(2)/``) count once.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re

import pandas as pd

from trappm_ray.labels.public_rows import RYUJAEHUN, measurement

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?P<dev>.+?)_(?:(?P<gpus>\d+)_gpus__)?(?P<prec>float|single|half|double)_model_"
                   r"(?P<mode>train|training|inference)_benchmark(?:\((?P<run>\d+)\))?\.csv$")
# The benchmark's device names (torch.cuda.get_device_name) -> data/devices.csv slug.
DEVICES = {"GeForce GTX 1080 Ti": "gtx1080ti", "GeForce RTX 2080 Ti": "rtx2080ti",
           "TITAN Xp": "titan-xp", "TITAN RTX": "titan-rtx", "TITAN V": "titan-v",
           "A100-SXM4-40GB": "a100-sxm4-40gb"}
PRECISIONS = {"float": "fp32", "single": "fp32", "half": "fp16", "double": "fp64"}
ARCH_PREFIX = "torchvision_"
BATCH, WARMUP, RESOLUTION = 12, 5, 224
METHOD = ("ryujaehun benchmark_models.py: torchvision model, random {res}x{res} inputs, batch {batch} "
          "(with gpus > 1 wrapped in nn.DataParallel), {warmup} warm-up iterations, then each "
          "timed iteration's wall time around torch.cuda.synchronize() (ms), train = forward + loss "
          "+ backward, no optimizer step, inference = forward, half/double = model and inputs cast "
          "to float16/float64 (not autocast)")


def torchvision_names() -> set[str] | None:
    """Classification model names torchvision knows (None when torchvision is not installed)."""
    try:
        import torchvision
    except ImportError:
        return None
    return set(torchvision.models.list_models(module=torchvision.models))


def _folder_info(folder: str) -> dict:
    """Protocol and provenance of one result folder from its config.json and system_info.txt."""
    info = {"batch": BATCH, "warmup": WARMUP, "cuda": None, "date": None}
    try:
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        info.update(batch=int(cfg.get("BATCH_SIZE", BATCH)), warmup=int(cfg.get("WARM_UP", WARMUP)))
    except (OSError, ValueError, TypeError):
        pass
    try:
        with open(os.path.join(folder, "system_info.txt")) as f:
            text = f.read()
        cuda = re.search(r"CUDA Version\s*:\s*([\d.]+)", text)
        date = re.search(r"benchmark start\s*:\s*(\d{4})/(\d{2})/(\d{2})", text)
        info.update(cuda=cuda[1] if cuda else None, date="-".join(date.groups()) if date else None)
    except OSError:
        pass
    return info


def read_file(path: str, source_file: str, known: set[str] | None,
              info: dict | None = None) -> tuple[list[dict], list[str]]:
    """Measurements of one per-iteration CSV: one per model column.

    Args:
        path: the file on disk.
        source_file: its path inside the source repository (provenance).
        known: torchvision model names (None: any name of letters, digits and underscores).
        info: the folder's protocol (:func:`_folder_info`); default: the benchmark's defaults.

    Returns:
        (measurements, issues) as :func:`trappm_ray.labels.public_timm.read_file`.
    """
    m = _NAME.match(os.path.basename(path))
    if not m or m["dev"] not in DEVICES:
        return [], [f"{source_file}: not a per-model benchmark file of a known GPU, skipped"]
    info = info or {"batch": BATCH, "warmup": WARMUP, "cuda": None, "date": None}
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        return [], [f"{source_file}: unreadable ({type(e).__name__}: {e}), skipped"]
    gpus = int(m["gpus"] or 1)
    train = m["mode"] != "inference"
    label = "train_step_ms" if train else "inference_ms"
    common = dict(resolution=RESOLUTION, batch_size=info["batch"], optimizer="none",
                  memory_format="nchw", gpus=gpus, parallelism="single" if gpus == 1 else f"dp{gpus}",
                  compiled="none", model_source="torchvision", cuda=info["cuda"], date=info["date"],
                  source_file=source_file, warmup=info["warmup"], torch_version=None,
                  method=METHOD.format(res=RESOLUTION, batch=info["batch"], warmup=info["warmup"]))
    out = []
    for model in table.columns:
        name = model.strip()
        samples = [pd.to_numeric(v, errors="coerce") for v in table[model]]
        error = None
        if not re.fullmatch(r"[a-z0-9_]+", name) or (known is not None and name not in known):
            error = f"unknown model name {name!r} (not a torchvision model)"
        elif not samples:
            error = "no timed iterations"
        value = float(pd.Series(samples, dtype=float).median()) if samples else None
        if error is None and any(not (isinstance(s, float) and math.isfinite(s) and s > 0)
                                 for s in map(float, samples)):
            error = "missing, NaN or non-positive iteration time in the source"
        cols = dict(common, arch=ARCH_PREFIX + name, family=_family(name), error=error,
                    **{"train_steps_timed" if train else "inference_steps_timed": len(samples)},
                    steps=len(samples))
        out.append(measurement(RYUJAEHUN, DEVICES[m["dev"]], PRECISIONS[m["prec"]], label, value,
                               samples=None if error else samples, **cols))
    return out, []


def _family(name: str) -> str:
    from trappm_ray.corpus.zoo import family_of

    return family_of(name)


def read(folder: str) -> tuple[list[dict], list[str]]:
    """Measurements of every benchmark CSV under ``folder`` (the source's ``results/`` and
    ``new_results/``); byte-identical copies and files of other shapes are reported and skipped."""
    known = torchvision_names()
    out, issues, seen = [], [], {}
    for top in ("results", "new_results"):
        for dirpath, dirnames, filenames in sorted(os.walk(os.path.join(folder, top))):
            dirnames.sort()
            info = _folder_info(dirpath)
            for name in sorted(f for f in filenames if f.endswith(".csv")):
                path = os.path.join(dirpath, name)
                source_file = os.path.relpath(path, folder).replace(os.sep, "/")
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                if digest in seen:
                    issues.append(f"{source_file}: identical to {seen[digest]}, counted once")
                    continue
                seen[digest] = source_file
                found, bad = read_file(path, source_file, known, info)
                out += found
                issues += bad
    return out, issues


__all__ = ["DEVICES", "PRECISIONS", "ARCH_PREFIX", "METHOD", "torchvision_names", "read_file", "read"]
