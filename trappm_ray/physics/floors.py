"""What no training step or inference pass can go below, and the GPU memory answer from physics.

A number that breaks physics is a defect, so every answer is held at or above these:

* memory: the bytes weights, gradients and optimizer state occupy plus the largest tensor one
  operator produces (:func:`memory_floor_mb`);
* time: the roofline floor (:mod:`trappm_ray.physics.roofline`) or the host's least time to
  issue the graph's kernels, whichever is larger (:func:`time_floors_ms`): in eager PyTorch the
  host dispatches every kernel, so a step is never shorter than that either.

:func:`gpu_memory_mb` is the CUDA memory model's answer (:mod:`trappm_ray.physics.memory`) with
the interval it is given where no measured GPU memory corrects it.
"""
from __future__ import annotations

from trappm_ray import devices
from trappm_ray.graph.featurize import VIEW_OPS
from trappm_ray.physics.memory import state_floor_bytes, training_memory
from trappm_ray.physics.roofline import roofline

# The CUDA memory model's interval where no measured GPU memory corrects it: its censored check
# on timm's RTX 3090 rows misses by a median 5.7% where it errs (docs/memory.md); +-15% covers
# that with room for the allocator and context assumptions.
GPU_MEMORY_TOLERANCE = 0.15
HALF_PRECISIONS = ("amp-fp16", "amp-bf16", "fp16", "bf16")
# The least host time per graph kernel assumed anywhere (a floor, not a level): eager dispatch +
# launch of the order commonly measured, 5-20 us per launched kernel, taken as 10 us, a training
# step launching three per graph kernel (forward, input gradient, weight gradient). The labels
# bound it from above only (16 us for RTX 4090 inference, test_vit at batch 512).
LEAST_HOST_US_PER_KERNEL = {"train_step_ms": 30.0, "inference_ms": 10.0}


def memory_floor_mb(graph, precision: str, optimizer: str) -> float:
    """Weights + gradients + optimizer state of ``graph``'s parameters, plus the largest tensor
    one operator materialises (resident beside them at some moment of every step), in MB.

    Views and weight-only nodes materialise nothing; under half precision an activation may be
    stored at half the width the file declares, so it counts for half.
    """
    largest = max((b for op, b in zip(graph.ops, graph.out_bytes) if op not in VIEW_OPS),
                  default=0.0)
    if precision in HALF_PRECISIONS:
        largest /= 2
    return (state_floor_bytes(float(graph.static["params"]), precision, optimizer)
            + float(largest)) / 2**20


def time_floors_ms(graph, device: dict, precision: str, optimizer: str,
                   spec: devices.DeviceSpec | None = None) -> dict[str, float]:
    """Floors of a training step and an inference pass on the predictor's device (its ``spec``
    row of the device table, or ``spec`` itself: a user's GPU absent from the table): the larger
    of the roofline floor and the least host time to issue the graph's kernels
    (:data:`LEAST_HOST_US_PER_KERNEL`); empty where the device has no
    spec or no sourced peak (the project's own CPU VMs)."""
    if spec is None:
        try:
            spec = devices.get(device.get("spec") or device.get("slug", ""))
        except KeyError:
            return {}
    out = {}
    for target, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
        try:
            est = roofline(graph, spec, precision, mode, optimizer)
        except ValueError:  # a precision the device has no sourced peak for
            return {}
        # the host issues every kernel, at least one a step (a graph of views still computes its
        # loss, or copies its output): a step never takes less than that issue time either
        out[target] = max(est.total_ms, max(est.kernels, 1) * LEAST_HOST_US_PER_KERNEL[target] / 1e3)
    return out


def gpu_memory_mb(graph, precision: str, optimizer: str, recompute: bool = False, grad_accum: int = 1,
                  zero: int = 0, shards: int = 1) -> dict:
    """Training memory on a GPU from the CUDA memory model (device memory in use, as NVML
    reports it): value, interval and each term, in MB; ``recompute``, ``grad_accum`` and ZeRO's
    ``zero`` and ``shards`` as :func:`~trappm_ray.physics.memory.training_memory` takes them."""
    est = training_memory(graph, precision, optimizer, recompute=recompute, grad_accum=grad_accum, zero=zero,
                          shards=shards)
    terms = est.to_mb()
    value = terms["device_used"]
    return {"value": value, "low": max(value * (1 - GPU_MEMORY_TOLERANCE), terms["floor"]),
            "high": value * (1 + GPU_MEMORY_TOLERANCE),
            "terms": {k: round(terms[k], 1) for k in ("weights", "grads", "optimizer_state",
                                                       "activations_saved", "transient_peak",
                                                       "workspace", "allocator_overhead", "context",
                                                       "allocated", "reserved", "device_used",
                                                       "floor")}}


__all__ = ["GPU_MEMORY_TOLERANCE", "HALF_PRECISIONS", "LEAST_HOST_US_PER_KERNEL", "memory_floor_mb",
           "time_floors_ms", "gpu_memory_mb"]
