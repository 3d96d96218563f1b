"""Features of one graph on one device: the input of every device-aware regressor.

One vector per (graph, device, setting): the v2 static features of the graph, log terms of its
roofline floor on the device (:mod:`trappm_ray.physics.roofline`, Williams et al., CACM 2009),
the device's spec vector (:func:`trappm_ray.devices.spec_vector`) and the run settings. The GPU
evaluation (:mod:`trappm_ray.evaluate.gpu`) builds its examples with it, and the spec-based
predictor (:mod:`trappm_ray.model.spec_model`) builds the same vector at prediction time, so a
model fitted on one is read by the other without drift.
"""
from __future__ import annotations

import math

import numpy as np

from trappm_ray import devices
from trappm_ray.graph import features
from trappm_ray.physics.floors import HALF_PRECISIONS
from trappm_ray.physics.roofline import roofline

ROOF_COLS = ("log_total_ms", "log_forward_ms", "log_optimizer_ms", "compute_bound_share",
             "log_compute_ms", "log_memory_ms", "log_kernels")
SETTING_COLS = ("train", "nhwc", "compiled", "torch2", "half", "fp64")
# where log(kernel count) sits in roofline_features' vector and in feature_vector, which starts with it
KERNELS_COL = len(features.V2_STATIC) + ROOF_COLS.index("log_kernels")


def feature_names() -> list[str]:
    """Column names of :func:`feature_vector`, in order."""
    spec = [f"{k}{s}" for k in devices.VECTOR_FIELDS for s in ("", "_missing")]
    return [*features.V2_STATIC, *ROOF_COLS, *spec, *(f"kind_{k}" for k in devices.KINDS), *SETTING_COLS]


def optimizer_of(row: dict) -> str:
    """The roofline's optimizer for a label row (the importer names timm's SGD ``sgd-momentum``)."""
    return row.get("optimizer") or "none"


def settings_of(row: dict, target: str) -> dict[str, float]:
    """The run settings of a label row measuring ``target`` (``SETTING_COLS`` -> 0/1)."""
    versions = (row.get("torch_version") or "").split(";")
    return settings(target == "train_step_ms", row.get("precision") or "fp32", row.get("memory_format") == "nhwc",
                    (row.get("compiled") or "none") != "none", any(v.startswith("2") for v in versions))


def settings(train: bool, precision: str, nhwc: bool = False, compiled: bool = False,
             torch2: bool = True) -> dict[str, float]:
    """``SETTING_COLS`` for a run; the defaults are a prediction's (eager PyTorch 2, NCHW).

    Args:
        train: a training step (else an inference pass).
        precision: a roofline precision (``amp-fp16``, ``fp32``, ...).
        nhwc: channels-last memory format. compiled: under ``torch.compile``.
        torch2: PyTorch 2 (fused attention in the roofline).
    """
    return {"train": float(train), "nhwc": float(nhwc), "compiled": float(compiled),
            "torch2": float(torch2), "half": float(precision in HALF_PRECISIONS), "fp64": float(precision == "fp64")}


def roofline_features(graph, spec: devices.DeviceSpec, precision: str, mode: str, optimizer: str,
                      setting: dict) -> tuple[float, np.ndarray] | None:
    """(floor in ms, v2 static features + log roofline terms) of a featurized graph on ``spec``,
    or None when the device has no roofline at ``precision`` (no sourced peak).

    Args:
        graph: a :class:`trappm_ray.graph.featurize.Graph` at the run's batch size.
        spec: the device. precision, mode, optimizer: as :func:`trappm_ray.physics.roofline.roofline`.
        setting: :func:`settings` of the run (``torch2`` turns fused attention on, ``compiled``
            the compiler's fusion).
    """
    try:
        est = roofline(graph, spec, precision, mode, optimizer, fused_attention=bool(setting["torch2"]),
                       compiled=bool(setting["compiled"]))
    except ValueError:
        return None
    # A graph of views alone (Flatten, Transpose) has a zero floor: its log terms sit at the
    # smallest time the features know, as the compute and memory terms below do.
    roof = [math.log(max(est.total_ms, 1e-9)), math.log(max(est.forward_ms, 1e-9)), math.log1p(est.optimizer_ms),
            est.compute_bound_share, math.log(est.compute_ms.sum() + 1e-9),
            math.log(est.memory_ms.sum() + 1e-9), math.log(max(est.kernels, 1))]
    return est.total_ms, np.concatenate([features.static_features(graph, "v2"), roof])


def feature_vector(graph_roof: np.ndarray, spec: devices.DeviceSpec, setting: dict) -> np.ndarray:
    """The full input: ``roofline_features``' vector + the device's spec vector + the settings."""
    return np.concatenate([graph_roof, devices.spec_vector(spec), [setting[c] for c in SETTING_COLS]])


EAGER_TORCH2 = {"torch2": 1, "compiled": 0}  # a prediction's framework setting unless a predictor's labels fix one


def static_input(graph, spec: devices.DeviceSpec, setting: dict, mode: str, run: dict
                 ) -> tuple[float, np.ndarray] | None:
    """(roofline floor in ms, static vector) of ``graph`` on ``spec`` for one target, or None
    without a roofline at the setting's precision.

    Args:
        setting: resolved options (``precision``, ``optimizer``, ``memory_format``).
        mode: ``train`` or ``infer``. run: ``torch2``/``compiled`` of the predictor's labels.
    """
    s = settings(mode == "train", setting["precision"], setting.get("memory_format") == "nhwc",
                 bool(run.get("compiled")), bool(run.get("torch2")))
    found = roofline_features(graph, spec, setting["precision"], mode,
                              setting["optimizer"] if mode == "train" else "none", s)
    return None if found is None else (found[0], feature_vector(found[1], spec, s))


__all__ = ["EAGER_TORCH2", "static_input", "ROOF_COLS", "SETTING_COLS", "KERNELS_COL", "feature_names", "optimizer_of", "settings_of", "settings",
           "roofline_features", "feature_vector"]
