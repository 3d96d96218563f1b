"""Small workloads on a GPU: the host's time to issue kernels, and answers below the labeled range.

In eager PyTorch the host issues every kernel (dispatch, autograd, launch) while the GPU runs
the previous ones, so a step takes about the larger of the two: the GPU's work (of which the
roofline floor is the lower bound) and the host's ``kernels x host time per kernel``. A model at
batch 1 or at a low resolution sits on the host's side of that maximum, a region the public GPU
labels barely cover (timm measures each model at the largest batch that fits): a regressor of
log(measured / floor) trained on them extrapolates there, and it does so badly (resnet10t at
64 px, batch 1, RTX 3090: the GNN answered a 25.6 ms training step beside a 0.43 ms inference).

Two figures per device and target, measured on the predictor's own training rows
(:func:`profile`):

* ``host_us_per_kernel``: the least measured time per graph kernel among eager rows, an upper
  bound on the host's time per kernel, and the host time itself where launch-bound rows exist
  (RTX 3090: efficientnet_cc at batch 1, 129 us per kernel for a training step, 30 us for
  inference);
* ``floor_us_per_kernel_p05``: the 5th percentile of roofline floor per kernel, the lower edge
  of the workloads the predictor was trained on.

Below that edge an answer is rebuilt from one at a batch inside it (the *anchor*, :func:`extrapolate`):
the host's share ``kernels x host time`` stays, the rest scales with the roofline floor. It adds
the two rather than taking the larger: between the regimes some kernels wait on the host and
others on the GPU, and the sum errs toward the longer step. It is monotone in batch and never
more than doubles when the batch doubles.
"""
from __future__ import annotations

import math

import numpy as np

from trappm_ray.model.device_features import KERNELS_COL, SETTING_COLS

EDGE_QUANTILE = 0.05
# A typical eager PyTorch host's time per graph kernel (the RTX 3090's labels: 129 us for an AMP
# training step, 30 us for inference, at efficientnet_cc batch 1; ryujaehun's batch-12 rows on
# six GPUs read 112-220 / 31-70 us): the host-bound level of a step of unknown host.
HOST_US_PER_KERNEL = {"train_step_ms": 130.0, "inference_ms": 30.0}


def profile(rows: list[dict]) -> dict[str, float | int | list]:
    """Host time per kernel and the lower workload edge of one target's training rows.

    Args:
        rows: ``{"measured": ms, "floor": ms, "kernels": n, "compiled": 0|1, "key": [..., batch]}``
            per label row of one device (or of every device of the spec-based predictor).

    Returns:
        ``host_us_per_kernel`` (with the ``host_row`` that set it), ``floor_us_per_kernel_p05``,
        ``batch_max`` (the largest labeled batch: no anchor lies beyond it) and ``rows``; empty
        without eager rows.
    """
    eager = [r for r in rows if not r.get("compiled") and r["kernels"] > 0]
    if not eager:
        return {}
    per_kernel = np.array([r["measured"] / r["kernels"] for r in eager]) * 1e3
    floor_per_kernel = np.array([r["floor"] / r["kernels"] for r in eager]) * 1e3
    least = int(per_kernel.argmin())
    return {"host_us_per_kernel": round(float(per_kernel[least]), 2), "host_row": list(eager[least]["key"]),
            "floor_us_per_kernel_p05": round(float(np.quantile(floor_per_kernel, EDGE_QUANTILE)), 2),
            "batch_max": int(max(r["key"][-1] for r in eager)), "rows": len(eager)}


def profiles(examples: list[dict]) -> dict[str, dict]:
    """:func:`profile` per target of GPU examples (:func:`trappm_ray.train.gpu_examples.examples`
    rows; CPU rows are left out: a CPU runs its kernels itself)."""
    by_target: dict[str, list] = {}
    for e in examples:
        if e["kind"] == "cpu":
            continue
        by_target.setdefault(e["target"], []).append(
            {"measured": e["measured"], "floor": e["floor"], "kernels": math.exp(e["x"][KERNELS_COL]),
             "compiled": e["setting"][SETTING_COLS.index("compiled")], "key": [e["slug"], *e["rkey"][:3]]})
    return {t: p for t, rows in sorted(by_target.items()) if (p := profile(rows))}


def host_base_ms(floor_ms, kernels, targets, cpu=False, host_us: dict | None = None):
    """The larger of the roofline floor and the host's time to issue ``kernels`` kernels
    (``host_us`` per target, default :data:`HOST_US_PER_KERNEL`): the least a step of eager
    PyTorch can take on a GPU; on a CPU (``cpu``), which issues nothing to another device, the
    floor. Element-wise on arrays."""
    per = np.vectorize((host_us or HOST_US_PER_KERNEL).__getitem__, otypes=[float])(targets)
    host = np.asarray(kernels, np.float64) * per / 1e3
    return np.where(cpu, floor_ms, np.maximum(floor_ms, host))


def below_edge(floor_ms: float, kernels: float, prof: dict) -> bool:
    """Whether a workload (roofline floor ``floor_ms`` over ``kernels`` kernels) lies below the
    labeled range of ``prof`` (a :func:`profile`)."""
    return bool(prof) and kernels > 0 and floor_ms * 1e3 / kernels < prof["floor_us_per_kernel_p05"]


def anchor_batch(batch: int, floor_ms: float, floor_2x_ms: float, kernels: float, prof: dict) -> int:
    """The least ``batch x 2^k`` whose floor reaches the labeled edge, the floor taken as affine in
    the batch through its values at ``batch`` and ``2 x batch``; never beyond the labeled batches
    (``batch_max``): an answer there would itself be an extrapolation."""
    slope = max(floor_2x_ms - floor_ms, 0.0) / batch
    need = prof["floor_us_per_kernel_p05"] * kernels / 1e3
    b = batch
    while 2 * b <= prof["batch_max"] and floor_ms + (b - batch) * slope < need:
        b *= 2
    return b


def extrapolate(anchor_ms: float, anchor_floor_ms: float, floor_ms: float, kernels: float,
                host_us: float) -> float:
    """The answer at a workload below the edge from the anchor's: the host's share (``kernels x
    host_us``, at most the anchor's answer) plus the rest of the anchor's answer scaled by the
    ratio of the floors. Equals ``anchor_ms`` at the anchor's floor."""
    host = min(kernels * host_us / 1e3, anchor_ms)
    return host + (anchor_ms - host) * min(floor_ms / anchor_floor_ms, 1.0)


__all__ = ["EDGE_QUANTILE", "HOST_US_PER_KERNEL", "host_base_ms", "profile", "profiles", "below_edge",
           "anchor_batch", "extrapolate"]
