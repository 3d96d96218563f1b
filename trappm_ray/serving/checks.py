"""Checks every prediction passes before it is answered: physics and the training domain.

A number that breaks physics is a defect, and a confident number for a model unlike anything the
predictor saw misleads. So: training memory is never below the bytes that weights, gradients and
optimizer state occupy plus the largest tensor one operator produces (:func:`memory_floor_mb`);
a model far from the training graphs is flagged and its interval widened
(:mod:`trappm_ray.model.domain`); and costs beyond any device (memory far above the largest GPU of
the spec table, steps lasting longer than a year) are flagged in words rather than returned as
silent numbers.
"""
from __future__ import annotations

from trappm_ray import devices
from trappm_ray.graph import features
from trappm_ray.graph.featurize import VIEW_OPS, Graph
from trappm_ray.model.domain import assess
from trappm_ray.model.launch import LEAST_HOST_US_PER_KERNEL
from trappm_ray.physics.memory import state_floor_bytes, training_memory
from trappm_ray.physics.roofline import roofline

YEAR_MS = 365.25 * 24 * 3600 * 1e3
# The CUDA memory model's interval where no measured GPU memory corrects it: its censored check
# on timm's RTX 3090 rows misses by a median 5.7% where it errs (docs/memory.md); +-15% covers
# that with room for the allocator and context assumptions.
GPU_MEMORY_TOLERANCE = 0.15
HALF_PRECISIONS = ("amp-fp16", "amp-bf16", "fp16", "bf16")
BEYOND_DEVICES = 10.0  # memory above 10x the largest device's is not a job anyone can run


def memory_floor_mb(graph: Graph, precision: str | None, optimizer: str | None) -> float:
    """Weights + gradients + optimizer state of ``graph``'s parameters, plus the largest tensor
    one operator materialises (resident beside them at some moment of every step), in MB.

    Views and weight-only nodes materialise nothing; under half precision an activation may be
    stored at half the width the file declares, so it counts for half.
    """
    precision = precision or "fp32"
    largest = max((b for op, b in zip(graph.ops, graph.out_bytes) if op not in VIEW_OPS),
                  default=0.0)
    if precision in HALF_PRECISIONS:
        largest /= 2
    return (state_floor_bytes(float(graph.static["params"]), precision, optimizer or "adam")
            + float(largest)) / 2**20


def time_floors_ms(graph: Graph, device: dict, precision: str | None,
                   optimizer: str | None, spec: devices.DeviceSpec | None = None) -> dict[str, float]:
    """Floors of a training step and an inference pass on the predictor's device (its ``spec``
    row of the device table, or ``spec`` itself: a user's GPU absent from the table): the larger
    of the roofline floor and the least host time to issue the graph's kernels
    (:data:`~trappm_ray.model.launch.LEAST_HOST_US_PER_KERNEL`); empty where the device has no
    spec or no sourced peak (the project's own CPU VMs)."""
    if spec is None:
        try:
            spec = devices.get(device.get("spec") or device.get("slug", ""))
        except KeyError:
            return {}
    precision = precision or "amp-fp16"
    opt = optimizer or "sgd-momentum"
    out = {}
    for target, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
        try:
            est = roofline(graph, spec, precision, mode, opt)
        except ValueError:  # a precision the device has no sourced peak for
            return {}
        # the host issues every kernel, at least one a step (a graph of views still computes its
        # loss, or copies its output): a step never takes less than that issue time either
        out[target] = max(est.total_ms, max(est.kernels, 1) * LEAST_HOST_US_PER_KERNEL[target] / 1e3)
    return out


def gpu_memory_mb(graph: Graph, precision: str | None, optimizer: str | None) -> dict:
    """Training memory on a GPU from the CUDA memory model (device memory in use, as NVML
    reports it): value, interval and each term, in MB."""
    est = training_memory(graph, precision or "amp-fp16", optimizer or "sgd-momentum")
    terms = est.to_mb()
    value = terms["device_used"]
    return {"value": value, "low": max(value * (1 - GPU_MEMORY_TOLERANCE), terms["floor"]),
            "high": value * (1 + GPU_MEMORY_TOLERANCE),
            "terms": {k: round(terms[k], 1) for k in ("weights", "grads", "optimizer_state",
                                                       "activations_saved", "transient_peak",
                                                       "workspace", "allocator_overhead", "context",
                                                       "allocated", "reserved", "device_used",
                                                       "floor")}}


def domain_of(manifest: dict, graph: Graph) -> dict:
    """How far ``graph`` is from the predictor's training graphs (see ``model.domain.assess``)."""
    return assess(manifest.get("domain"), features.static_features(graph, manifest["feature_set"]))


def absurdities(train_step_ms: float | None, train_memory_mb: float | None,
                inference_ms: float | None = None) -> list[str]:
    """Plain-words flags for costs no real training job has."""
    out = []
    if train_step_ms is not None and inference_ms is not None and inference_ms > train_step_ms:
        out.append(f"inference ({inference_ms:.4g} ms) predicted slower than a training step "
                   f"({train_step_ms:.4g} ms), which runs the same forward pass and more: at least one "
                   f"of the two is wrong for this model")
    largest = max((s.memory_gb or 0) for s in devices.load_specs().values()) * 1024
    if train_memory_mb is not None and train_memory_mb > BEYOND_DEVICES * largest:
        out.append(f"training memory {train_memory_mb / 1024:,.0f} GB is over {BEYOND_DEVICES:g}x "
                   f"the largest device in the spec table ({largest / 1024:,.0f} GB): the model "
                   f"cannot be trained as given")
    if train_step_ms is not None and train_step_ms > YEAR_MS:
        out.append(f"one training step would take {train_step_ms / YEAR_MS:,.0f} years: far outside "
                   f"anything measured, not a usable estimate")
    return out


__all__ = ["memory_floor_mb", "time_floors_ms", "gpu_memory_mb", "domain_of", "absurdities", "YEAR_MS",
           "GPU_MEMORY_TOLERANCE"]
