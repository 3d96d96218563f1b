"""Training options a prediction is for: precision, optimizer, GPU count, memory format.

What a measurement varied is part of a prediction: a step in AMP fp16 with SGD on an RTX 3090 is
not a step in fp32 with Adam. Each predictor's manifest lists the values its labels hold
(``options``); a request names values or takes the predictor's defaults (its labels' values),
and a value the predictor never saw is refused with :class:`~trappm_ray.errors.UnsupportedOption`.
"""
from __future__ import annotations

from trappm_ray import errors
from trappm_ray.model.manifest import Manifest

PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "fp16", "bf16", "fp64")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd-momentum", "none")
MEMORY_FORMATS = ("nchw", "nhwc")
FIELDS = ("precision", "optimizer", "gpus", "memory_format")
# How a step runs rather than what it computes: no label varies them; on a GPU the step model
# moves an answer to them (``Manifest.moves``, :class:`~trappm_ray.model.compositions.SettingMove`).
# Each with its default, which a resolved setting leaves out.
STEP_FIELDS = {"recompute": False, "grad_accum": 1}
# Predictors registered before manifests listed their options: the CPU harness's only setting.
LEGACY_CPU: dict[str, list] = {"precision": ["fp32"], "optimizer": ["adam"], "gpus": [1]}
# The one place a setting gets a value nobody gave: a predictor whose labels do not name a field
# answers for PyTorch's defaults (fp32 tensors; Adam, the paper's optimizer).
DEFAULTS = {"precision": "fp32", "optimizer": "adam"}
_DTYPE_PRECISION = {"float32": "fp32", "float16": "amp-fp16", "bfloat16": "amp-bf16"}


def step_fields(setting: dict) -> dict:
    """A resolved setting's activation checkpointing and passes per step (defaults when absent)."""
    return {k: setting.get(k) or default for k, default in STEP_FIELDS.items()}


def label_options(rows: list[dict]) -> dict[str, list]:
    """The option values a device's label rows hold, most frequent first (the default)."""
    out = {}
    for field in FIELDS:
        counts: dict = {}
        for r in rows:
            value = r.get(field)
            if field == "precision" and value is None:
                value = _DTYPE_PRECISION.get(r.get("dtype") or "")
            if field == "gpus" and value is None:
                value = 1
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
        if counts:
            out[field] = sorted(counts, key=lambda v: -counts[v])
    return out


def trained_options(manifest: Manifest) -> dict[str, list]:
    """The options a predictor was trained on (its manifest's, else the legacy CPU setting)."""
    return manifest.options or LEGACY_CPU


def resolve(requested: dict, manifest: Manifest) -> dict:
    """Requested option values (None = the predictor's default) checked against the predictor.

    Raises:
        errors.UnsupportedOption: a value that is unknown, or that the predictor never saw.
    """
    known = {"precision": PRECISIONS, "optimizer": OPTIMIZERS, "memory_format": MEMORY_FORMATS}
    trained = trained_options(manifest)
    out = {}
    for field in FIELDS:
        value, seen = requested.get(field), trained.get(field)
        if value is not None and field in known and value not in known[field]:
            raise errors.UnsupportedOption(f"{field} {value!r} is not one of {', '.join(known[field])}")
        if value is not None and seen is not None and value not in seen:
            raise errors.UnsupportedOption(
                f"the {manifest.device.slug} predictor was trained on "
                f"{field} {', '.join(map(str, seen))}, not {value!r}")
        if value is not None and seen is None:
            raise errors.UnsupportedOption(f"the predictor's labels do not vary {field}; leave it unset")
        out[field] = value if value is not None else (seen[0] if seen else DEFAULTS.get(field))
    for field, default in STEP_FIELDS.items():
        value = requested.get(field)
        if value is None or value == default:
            continue
        if field == "grad_accum" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096):
            raise errors.UnsupportedOption(f"grad_accum must be a whole number of passes in 1..4096, got {value!r}")
        if field not in manifest.moves:
            raise errors.UnsupportedOption(
                f"{field} is answered on GPUs (the step model moves a GPU's answer to it); the "
                f"{manifest.device.slug} predictor has no such path")
        out[field] = value if field == "grad_accum" else bool(value)
    return out


__all__ = ["PRECISIONS", "OPTIMIZERS", "MEMORY_FORMATS", "FIELDS", "STEP_FIELDS", "DEFAULTS", "step_fields", "label_options",
           "trained_options", "resolve"]
