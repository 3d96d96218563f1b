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

* ``host_us_per_kernel``: the least measured time per forward kernel among eager rows (kernels
  as the step model counts them: :func:`trappm_ray.physics.step_model.launches`), an upper bound
  on the host's time per kernel, and the host time itself where launch-bound rows exist (RTX
  3090: efficientnet_cc at batch 1, 168 us per kernel for a training step, 40 us for inference);
* ``floor_us_per_kernel_p05``: the 5th percentile of roofline floor per kernel, the lower edge
  of the workloads the predictor was trained on (recorded to describe the labels; answers no
  longer switch on it);
* ``batch_max``: the largest labeled batch, the ceiling of the anchor.

An answer on a GPU is read from the predictor at the batch its labels measure (the *anchor*,
:func:`anchor_batch`: the largest that fits the GPU, timm's protocol) and moved to the batch
asked by the physics step model's ratio between the two (:mod:`trappm_ray.physics.step_model`,
its host figures from the profile: :func:`step_host_us`): host issue time overlapping the GPU's
kernels as a queue, each kernel at its fill of the SMs. Throughput never falls as the batch
grows, and the learned part never sets the shape of the batch curve, which it never saw.
"""
from __future__ import annotations

import numpy as np

from trappm_ray.model.device_features import EAGER_TORCH2, SETTING_COLS
from trappm_ray.model.manifest import Manifest
from trappm_ray.physics.step_model import HOST_US

EDGE_QUANTILE = 0.05
# A typical eager PyTorch host's time per roofline graph kernel (the roofline's node count, which
# the spec-based model's features hold): the base of that model's answer, stored with its boosters.
HOST_US_PER_KERNEL = {"train_step_ms": 130.0, "inference_ms": 30.0}


def profile(rows: list[dict]) -> dict[str, float | int | list]:
    """Host time per kernel and the lower workload edge of one target's training rows.

    Args:
        rows: ``{"measured": ms, "floor": ms, "kernels": n (forward kernels), "compiled": 0|1,
            "key": [..., batch]}``
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
            {"measured": e["measured"], "floor": e["floor"], "kernels": e["launches"],
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


def step_host_us(profiles: dict) -> dict[str, float]:
    """The step model's host time per graph kernel (:data:`trappm_ray.physics.step_model.HOST_US`)
    from a predictor's launch ``profiles``: inference = the inference figure; the training figure
    shared among the training phases as the defaults share theirs (a host that issues a training
    kernel 1.4x slower does so in each phase); the defaults where a profile lacks one."""
    out = dict(HOST_US)
    infer = (profiles.get("inference_ms") or {}).get("host_us_per_kernel")
    train = (profiles.get("train_step_ms") or {}).get("host_us_per_kernel")
    if infer:
        out["inference"] = float(infer)
    if train:
        scale = float(train) / (HOST_US["forward"] + HOST_US["backward"] + HOST_US["autocast"])
        out.update({k: HOST_US[k] * scale for k in ("forward", "backward", "autocast", "recompute")})
    return out


ENVELOPE_QUANTILE = 0.25


def envelope_top(batches: list[int], kind: str) -> int:
    """How far up a CPU predictor's batch envelope reaches (:mod:`trappm_ray.serving.batch_envelope`):
    the lower quartile of its labels' ``batches``, below which its answers at ``2b, 4b, ...`` are
    interpolations, not extrapolations (the project's own CPU labels, batches 1-48: 4; labels
    all at batch 1: 1, no envelope). 0 for a GPU (``kind``), whose answers the step model moves."""
    if kind != "cpu" or not batches:
        return 0
    return int(np.quantile(np.asarray(batches, np.float64), ENVELOPE_QUANTILE))


def labels_fused_attention(manifest: Manifest) -> bool:
    """Whether a predictor's training-step labels ran attention fused (PyTorch 2): its network's
    ``run`` says; where it says nothing, a prediction's default (:data:`EAGER_TORCH2`). The
    anchor's fit is read in that setting: timm's RTX 3090 training labels ran PyTorch 1.10-1.12,
    whose attention kept its score matrices, so the batch they found to fit a transformer is about
    half what fused attention fits, and an anchor read with fused attention lay above the measured
    batch on 154 of 934 graphs, mostly Swin, ViT, DeiT, VOLO and BEiT (``experiments/anchor_batch.py``)."""
    runs = manifest.network.run if manifest.network else {}
    return bool(runs.get("train_step_ms", EAGER_TORCH2)["torch2"])


def anchor_batch(batch: int, fit: int, profiles: dict) -> int:
    """The batch whose learned answer another batch is moved from: the largest power of two that
    fits the GPU's memory (``fit``) and the labels' batches (``batch_max`` of the ``profiles``).
    That is where timm's labels measure every model (its largest batch that fits), so the learned
    correction is read where it was fitted, and the step model carries it down or up to ``batch``
    (a batch above it is one no label measured this model at, or one that does not fit)."""
    cap = min([fit, *(p["batch_max"] for p in profiles.values() if p.get("batch_max"))])
    return 1 << (int(cap).bit_length() - 1) if cap >= 1 else 1


__all__ = ["EDGE_QUANTILE", "ENVELOPE_QUANTILE", "HOST_US_PER_KERNEL", "envelope_top", "host_base_ms", "profile", "profiles", "step_host_us",
           "labels_fused_attention", "anchor_batch"]
