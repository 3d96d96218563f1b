"""CUDA training memory of one step (forward, loss, backward, optimizer) from an operator graph.

The model replays a PyTorch eager training step over the graph's topological order as a set of
byte intervals on a timeline of ``2N + 2`` steps (forward of node ``i`` at step ``i``, the loss
at ``N``, backward of node ``i`` at ``2N - i``, the optimizer at ``2N + 1``) and sums them with
one difference array, so the cost is linear in nodes and edges. What each operator keeps for
backward follows autograd's formulas (``tools/autograd/derivatives.yaml`` in PyTorch): matmuls
and convolutions keep their inputs, ReLU/Sigmoid/Tanh/Softmax their output, normalizations their
input, max-pooling its input and int64 indices, additions and views nothing. Views alias their
base tensor; chains of pointwise ops with one data input (exported GELU, SiLU, Mish) count as the
single fused op PyTorch runs, unless a ``Pow`` makes them arithmetic written in Python, run op by
op; BatchNorm folded into a Conv by an eval-mode export is restored.
Every term is reported separately in :class:`MemoryEstimate`; ``docs/memory.md`` documents the
constants and which peak a GPU/MIG fit uses (``device_used``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import numpy as np

from trappm_ray.physics.allocator import LARGE_SEGMENT, MID_SIZE, ROUND_LARGE, SMALL_SEGMENT, SMALL_SIZE
from trappm_ray.physics.autocast import HALF
from trappm_ray.physics.folded_norm import guess_folded_norm
from trappm_ray.physics.graph_walk import CAT_G as _G
from trappm_ray.physics.graph_walk import CAT_K as _K
from trappm_ray.physics.graph_walk import CAT_O as _O
from trappm_ray.physics.graph_walk import CAT_S as _S
from trappm_ray.physics.graph_walk import CAT_T as _T
from trappm_ray.physics.graph_walk import CAT_W as _W
from trappm_ray.physics.graph_walk import DEFAULT_ACT_BYTES, Walk, walk
from trappm_ray.physics.step_tensors import CUBLAS_WORKSPACE, OPTIMIZERS, PRECISIONS, MiB, StepLayout, zero_shares

log = logging.getLogger(__name__)

MODEL_VERSION = 13  # bump when a rule changes: cached predictions of older versions are dropped
# Blocks freed by the forward pass and reused in backward leave holes the allocator cannot fill:
# the share of the live large-block bytes (own segments, >= 10 MiB) and of the live mid-size ones
# (1-10 MiB, sharing 20 MiB segments: a freed one's space serves only requests that fit it). Set
# where the packed estimate reads what the allocator replay reads (no measurement): on 200 corpus
# graphs none of the GPU campaign's, 4 settings, batches 1-256, packed / replayed - 1 reads
# median -4.1% (|e| 4.4%) with 5% of large blocks alone, +0.1% (|e| 3.0%) with 10% of the mid
# ones beside (``experiments/packed_vs_replay.py``).
FRAGMENTATION = 0.05
MID_FRAGMENTATION = 0.10
# How the reserved peak is read: "packed", each phase's live blocks packed into the allocator's
# segments without a gap plus the fragmentation shares (a few vector operations: what every answer uses);
# "replay", the step's tensors replayed through the caching allocator's rules
# (:mod:`~trappm_ray.physics.allocator`): what the packed shares were set on (docs/memory.md), 10-20x the
# time (a replay per power of two up to the batch), too slow for the prediction path: a check beside it.
ALLOCATORS = ("packed", "replay")
# What NVML's used memory counts on top of the allocator's segments (the CUDA context: driver
# state, the kernel images loaded; and the driver's own reservation, which NVML's used includes),
# docs/memory.md. "lazy", module loading on demand (CUDA >= 11.7, PyTorch's default since 1.13):
# measured, NVML used less the reserved peak on all 822 rows of the GPU campaign (an H200, driver
# 580, CUDA 13.0, torch 2.11): median 1,392 MiB, 1,386-1,404 per model (EfficientNet-B0 1,778),
# where 450 MiB was assumed before. "eager", every kernel image loaded at start-up (CUDA 11.3
# builds, as in timm's 2022 RTX 3090 runs): ~1 GiB, an assumption.
CONTEXT_BYTES = {"lazy": 1392 * MiB, "eager": 1100 * MiB}
CATEGORIES = ("weights", "grads", "optimizer_state", "activations_saved", "transient_peak",
              "workspace")


@dataclass
class MemoryEstimate:
    """Training memory of one step, in bytes, each term at the step of the allocated peak.

    ``allocated = weights + grads + optimizer_state + activations_saved + transient_peak +
    workspace``; ``reserved = allocated + allocator_overhead``; ``device_used = reserved +
    context``. ``weights`` includes autocast's cached half copies (``weight_cast_cache``).

    Attributes:
        allocated: what ``torch.cuda.max_memory_allocated`` reports.
        reserved: what ``torch.cuda.max_memory_reserved`` reports.
        device_used: what NVML reports as used (reserved + CUDA context): the value to compare
            with a GPU's or MIG slice's memory.
        floor: master weights + their gradients + optimizer state (this GPU's share of them under
            ZeRO); no prediction goes below it.
        peak_phase: where the allocated peak falls: ``forward``, ``backward`` or ``optimizer``.
        saved_at_backward: activations kept for backward when backward starts (the data input
            included), comparable with what ``saved_tensors_hooks`` see in PyTorch.
        input_bytes: the data input batch.
    """

    weights: float
    grads: float
    optimizer_state: float
    activations_saved: float
    transient_peak: float
    workspace: float
    allocator_overhead: float
    context: float
    allocated: float
    reserved: float
    device_used: float
    floor: float
    weight_cast_cache: float
    saved_at_backward: float
    input_bytes: float
    peak_phase: str
    batch_size: int
    precision: str
    optimizer: str

    def to_mb(self) -> dict:
        """Every byte term in MiB (2**20 bytes), other fields unchanged."""
        return {k: (v / MiB if isinstance(v, float) else v) for k, v in asdict(self).items()}


def training_memory(graph, precision: str = "amp-fp16", optimizer: str = "sgd",
                    batch_size: int | None = None, folded_norm: np.ndarray | None = None,
                    grads_set_to_none: bool = True, foreach: bool = True,
                    context: str | float = "lazy", walked: Walk | None = None,
                    fragmentation: float = FRAGMENTATION, fused_attention: bool = True,
                    grad_accum: int = 1, recompute: bool = False, zero: int = 0, shards: int = 1,
                    allocator: str = "packed") -> MemoryEstimate:
    """Predict the peak CUDA memory of one training step of ``graph``.

    Args:
        graph: a :class:`trappm_ray.graph.featurize.Graph` (its nodes in topological order).
        precision: ``fp32``, ``amp-fp16``, ``amp-bf16`` (autocast, fp32 master weights),
            ``fp16`` (``model.half()``) or ``fp64``.
        optimizer: ``none``, ``sgd``, ``sgd-momentum``, ``adam`` or ``adamw``.
        batch_size: predict for this batch; batch-dependent tensors are scaled from the batch
            the graph was featurized at (exact for graphs whose activations carry the batch).
        folded_norm: per node, True where a Conv carries a BatchNorm folded in by an eval-mode
            export (see :func:`trappm_ray.physics.folded_norm.folded_norm_mask`); None guesses
            it from the graph (Conv with bias feeding no normalization).
        grads_set_to_none: ``optimizer.zero_grad(set_to_none=True)``, PyTorch's default since
            2.0: gradients appear during backward; False keeps them allocated all step.
        foreach: multi-tensor optimizer kernels (PyTorch >= 2.0 default on CUDA).
        context: ``lazy``/``eager`` CUDA module loading (see ``CONTEXT_BYTES``) or bytes.
        walked: a :class:`Walk` of ``graph`` computed before (reused across batch sizes).
        fragmentation: ``packed``: the share of the live large blocks lost to fragmentation
            (mid-size blocks lose :data:`MID_FRAGMENTATION`); the replay holds the allocator's own.
        fused_attention: attention runs as one fused kernel (PyTorch 2's
            ``scaled_dot_product_attention``, what timm and transformers call): the scores and
            their softmax never reach device memory; backward keeps one fp32 log-sum-exp per
            query row instead (FlashAttention, Dao et al., NeurIPS 2022).
        grad_accum: forward/backward passes per optimizer step; above 1 the gradients of the
            first pass stay allocated through the later ones (as ``grads_set_to_none=False``).
        recompute: activation checkpointing of every residual block
            (:func:`~trappm_ray.physics.graph_walk.checkpoint_segments`): forward keeps each
            block's output alone; backward runs the block's forward again and keeps what it
            saves until the block's gradients are done.
        zero, shards: ZeRO stage of data parallelism over ``shards`` GPUs (Rajbhandari et al.,
            SC 2020): from 1 each GPU keeps ``1 / shards`` of the optimizer state (and updates
            only that share, so the optimizer's temporaries shrink alike), from 2 of the
            gradients, at 3 (FSDP's full sharding) of the weights too, with two layers' weights
            gathered whole at a time (the one running and the one prefetched).
        allocator: how the reserved peak is read (:data:`ALLOCATORS`).

    Raises:
        ValueError: unknown precision or optimizer, or a non-positive batch size.
    """
    if precision not in PRECISIONS or optimizer not in OPTIMIZERS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)} and optimizer one of "
                         f"{sorted(OPTIMIZERS)}; got {precision!r}, {optimizer!r}")
    b0 = int(graph.static.get("batch_size", 1) or 1)
    b = b0 if batch_size is None else int(batch_size)
    if b < 1:
        raise ValueError("batch_size must be >= 1")
    if zero not in (0, 1, 2, 3) or shards < 1:
        raise ValueError(f"zero must be 0-3 and shards >= 1; got {zero!r}, {shards!r}")
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator must be one of {ALLOCATORS}; got {allocator!r}")
    if walked is None:
        if folded_norm is None:
            folded_norm = guess_folded_norm(graph)
        walked = walk(graph, folded_norm, arithmetic=True)
    step = StepLayout(graph, walked, precision, optimizer, grads_set_to_none and grad_accum <= 1, foreach,
                 fused_attention, recompute, zero, shards)
    t = step.at(b)
    n, steps = walked.num_nodes, t.steps
    width = steps + 1
    diff = (np.bincount(t.cat * width + t.start, weights=t.size, minlength=6 * width)
            - np.bincount(t.cat * width + t.end, weights=t.size, minlength=6 * width))
    timeline = np.cumsum(diff.reshape(6, width), axis=1)[:, :steps]
    total = timeline.sum(axis=0)
    peak = int(np.argmax(total))
    terms = timeline[:, peak]
    allocated = float(total[peak])
    if allocator == "replay":
        reserved = max(step.reserved(b), allocated)
    else:
        # the caching allocator keeps every segment it maps until the step ends: the reserved
        # peak is the largest of each phase's (its allocated peak plus the slack of the blocks
        # live then), so a forward-phase peak at a large batch cannot hide the optimizer's many
        # small parameter-sized blocks (reserved would fall as the batch grows)
        reserved = 0.0
        for lo, hi in ((0, n + 1), (n + 1, 2 * n + 1), (2 * n + 1, steps)):
            if hi > lo:
                at = lo + int(np.argmax(total[lo:hi]))
                live = t.size[(t.start <= at) & (t.end > at)]
                reserved = max(reserved, float(total[at]) + _reserved_extra(live, fragmentation))
    kept_w, kept_g, kept_o = zero_shares(zero, shards)
    floor = step.param_bytes * (kept_w + kept_g + OPTIMIZERS[optimizer][0] * kept_o)
    ctx = float(CONTEXT_BYTES[context] if isinstance(context, str) else context)
    iv = step.iv
    cast_cache = float(iv.size[iv.cat == _W].sum()) if PRECISIONS[precision][2] else 0.0
    est = MemoryEstimate(
        weights=float(terms[_W]), grads=float(terms[_G]), optimizer_state=float(terms[_O]),
        activations_saved=float(terms[_S]), transient_peak=float(terms[_T]),
        workspace=float(terms[_K]), allocator_overhead=reserved - allocated, context=ctx,
        allocated=max(allocated, floor), reserved=max(reserved, floor),
        device_used=max(reserved, floor) + ctx, floor=floor,
        weight_cast_cache=cast_cache, saved_at_backward=float(timeline[_S, n]),
        input_bytes=float(walked.elems[n] * PRECISIONS[precision][1] * b / b0), peak_phase=_phase(peak, n),
        batch_size=b, precision=precision, optimizer=optimizer)
    log.debug("memory %s/%s b=%d: %.0f MiB allocated at %s", precision, optimizer, b, est.allocated / MiB,
              est.peak_phase)
    return est


def _reserved_extra(live: np.ndarray, fragmentation: float) -> float:
    """Segment slack of the caching allocator for the blocks live at a peak, packed without a gap,
    and the holes fragmentation leaves among them (bytes)."""
    small = live[live <= SMALL_SIZE].sum()
    mid = live[(live > SMALL_SIZE) & (live < MID_SIZE)].sum()
    large = live[live >= MID_SIZE]
    seg = (math.ceil(small / SMALL_SEGMENT) * SMALL_SEGMENT
           + math.ceil(mid / LARGE_SEGMENT) * LARGE_SEGMENT
           + float((np.ceil(large / ROUND_LARGE) * ROUND_LARGE).sum()))
    return max(0.0, seg - float(live.sum())) + fragmentation * float(large.sum()) + MID_FRAGMENTATION * float(mid)


def _phase(t: int, n: int) -> str:
    return "forward" if t <= n else ("backward" if t <= 2 * n else "optimizer")


SLOPE_BATCH = 64  # the second point of fitting_batch's line


def fitting_batch(graph, precision: str, optimizer: str, memory_bytes: float, limit: int = 1 << 16,
                  recompute: bool = False, grad_accum: int = 1, fused_attention: bool = True) -> int:
    """The largest power-of-two batch whose training step fits ``memory_bytes`` of device memory
    (the model's ``device_used``, rescaled from ``graph``'s batch without featurizing again);
    0 when batch 1 does not fit, ``limit`` at most. Memory is near affine in the batch: the
    search starts where the line through batches 1 and 64 crosses the budget and checks its way
    to the exact power of two (3-5 evaluations instead of one per doubling). Batches 1 and 2 are
    too close: workspace caps and the allocator's rounding can read them alike (ResNet-101: 1.43
    and 1.43 GB), which sent the search to ``limit`` and down again, 12 evaluations.
    ``fused_attention``: attention as PyTorch 2 runs it (False: its score matrices held, as
    PyTorch 1 did)."""
    walked = walk(graph, guess_folded_norm(graph), arithmetic=True)

    def fits(b: int) -> bool:
        return used(b) <= memory_bytes

    def used(b: int) -> float:
        return training_memory(graph, precision, optimizer, batch_size=b, walked=walked, recompute=recompute,
                               grad_accum=grad_accum, fused_attention=fused_attention).device_used

    one = used(1)
    if one > memory_bytes:
        return 0
    slope = max((used(SLOPE_BATCH) - one) / (SLOPE_BATCH - 1), 1.0)
    guess = max(1, min(limit, int((memory_bytes - one) / slope) + 1))
    b = 1 << (guess.bit_length() - 1)
    while b > 1 and not fits(b):
        b //= 2
    while 2 * b <= limit and fits(2 * b):
        b *= 2
    return b


def state_floor_bytes(params: float, precision: str = "fp32", optimizer: str = "adam") -> float:
    """Bytes that weights, their gradients and the optimizer state occupy: the floor below which
    no training-memory figure can be, on any device.

    Args:
        params: parameter count. precision, optimizer: keys of ``PRECISIONS`` / ``OPTIMIZERS``.
    """
    width = PRECISIONS.get(precision, PRECISIONS["fp32"])[0]
    return params * width * (2 + OPTIMIZERS.get(optimizer, OPTIMIZERS["adam"])[0])


__all__ = ["ALLOCATORS", "zero_shares", "CONTEXT_BYTES", "FRAGMENTATION", "MID_FRAGMENTATION", "CUBLAS_WORKSPACE", "DEFAULT_ACT_BYTES", "MiB",
           "OPTIMIZERS", "PRECISIONS", "MemoryEstimate", "fitting_batch", "state_floor_bytes", "training_memory"]
