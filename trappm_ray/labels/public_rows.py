"""Shared pieces of the public-label readers: the sources' provenance and one measurement as a row.

See :mod:`trappm_ray.labels.public` for what the rows mean and how they are summarised.
"""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

from trappm_ray import devices

log = logging.getLogger(__name__)

# precision -> the device folder's suffix ("regime") and the dtype column
REGIMES = {"amp-fp16": "amp", "amp-bf16": "amp-bf16", "fp32": "fp32", "fp16": "fp16",
           "bf16": "bf16", "fp64": "fp64"}
DTYPES = {"amp-fp16": "float16", "amp-bf16": "bfloat16", "fp32": "float32", "fp16": "float16",
          "bf16": "bfloat16", "fp64": "float64"}


@dataclass(frozen=True)
class Source:
    """A public source: where its numbers come from (SOURCES.md) and under which license."""
    name: str
    repo: str
    commit: str
    license: str


TIMM = Source("timm", "huggingface/pytorch-image-models", "aa4b5850", "Apache-2.0")
NEUSIGHT = Source("neusight", "sitar-lab/NeuSight", "6945927", "MIT")
RYUJAEHUN = Source("ryujaehun", "ryujaehun/pytorch-gpu-benchmark", "3f47a9e", "MIT")


@functools.lru_cache(maxsize=1)
def device_names() -> dict[str, tuple[str, str]]:
    """``{spec slug: (full name, kind)}`` from the device spec table (:mod:`trappm_ray.devices`);
    {} when the table cannot be read (rows then carry the slug as their device name)."""
    try:
        return {slug: (spec.name, spec.kind) for slug, spec in devices.load_specs().items()}
    except (OSError, ValueError) as e:
        log.warning("device spec table unreadable (%s): device names fall back to slugs", e)
        return {}


def measurement(source: Source, spec: str, precision: str, label: str, value, samples=None,
                **cols) -> dict:
    """One source measurement as a row dict (plus the private ``_label`` and ``_samples``).

    Args:
        source: where it comes from (fills the provenance columns).
        spec: the device's slug in the spec table (``trappm_ray/data/devices.csv``); the
            device folder is ``<spec>-<regime>``.
        precision: one of :data:`REGIMES`.
        label: ``train_step_ms`` or ``inference_ms``: which label ``value`` is.
        value: the source's time in ms per step (any type; validated here).
        samples: the per-step times behind ``value`` where the source gives them; else [value].
        **cols: further store columns (arch, batch_size, ... ; ``error`` makes it an error row).
    """
    names = device_names()
    row = {"device_slug": f"{spec}-{REGIMES[precision]}", "device_spec": spec,
           "precision": precision, "dtype": DTYPES[precision], "status": "ok",
           "source_repo": source.repo, "source_commit": source.commit, "license": source.license,
           "exporter": None, "device_name": names.get(spec, (spec, ""))[0],
           "device": names.get(spec, ("", "cuda"))[1] or "cuda", **cols}
    reason = row.pop("error", None) or _bad_time(value)
    if reason is None and samples is not None:
        reason = next((f"bad per-step time {s!r}" for s in samples if _bad_time(s)), None)
    if reason:
        return row | {"status": "error", "error": reason, "_label": label, "_samples": []}
    samples = [float(s) for s in (samples if samples is not None else [value])]
    return row | {"_label": label, "_value": float(value), "_samples": samples}


def _bad_time(value) -> str | None:
    """Why ``value`` is not a usable time in ms (None when it is)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "time missing in the source"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return f"time is not a number: {value!r}"
    if not math.isfinite(v):
        return "time missing (NaN) in the source"
    return None if v > 0 else f"non-positive time {v}"


__all__ = ["Source", "TIMM", "NEUSIGHT", "RYUJAEHUN", "REGIMES", "DTYPES", "device_names",
           "measurement"]
