"""A training step or an inference pass as eager PyTorch runs it: the host issues kernels one
after another while the GPU runs them, each kernel as fast as it fills the GPU.

The roofline (:mod:`trappm_ray.physics.roofline`) is a floor: every kernel at the device's peak,
no host. A real step differs from it in three ways this module models from the graph and the
spec sheet alone, so that the answer holds at every batch and in every setting:

* **Fill.** A kernel runs in waves of thread blocks over the SMs; a kernel of fewer blocks than
  the GPU has slots leaves SMs idle, and the last wave of a larger one is partly empty (the
  *wave quantization* of GEMMs and convolutions, whose blocks are output tiles); a GEMM of too
  few tiles but a long reduction is split along it (*split-K*, :func:`split_k`). A node's compute
  time is its FLOPs at an achievable share of the peak (:class:`Efficiency`) divided by its fill
  ``blocks / (waves x slots)``; its memory time is its bytes at the achievable bandwidth; its
  device time the larger, never less than the least time of any kernel.
* **Host.** The host spends a roughly fixed time per kernel (Python, dispatch, autograd, launch:
  :data:`HOST_US`, measured phase by phase on the GPU campaign's host: about 120 us per kernel for
  a training step, 33 us for inference). A kernel is an op eager PyTorch runs: views, scalar
  arithmetic on shapes and the members of a fused pointwise chain (an exported GELU) launch none.
  It issues kernel ``k`` at ``issue_k``; the GPU starts it when it is issued and the previous
  one has finished. The step ends at ``max_k(issue_k + device time of kernels k..n)``: the larger of host and device time where one
  dominates, smoothly more than either between them (a queue, not a sum, not a plain maximum).
* **Setting.** Precision moves peaks and bytes (the roofline's counting); the optimizer step is
  what PyTorch's ``foreach`` implementation runs (:data:`OPTIMIZER_PASSES`: so many list ops,
  each a few kernels over all parameters, each reading and writing fp32 tensors), AMP adds its
  gradient unscale pass, activation recompute a second forward, gradient accumulation ``k``
  forward/backward passes per optimizer step; the loss over the output (:mod:`~trappm_ray.physics.loss`,
  not in an exported graph) ends each forward pass.

Throughput never falls as the batch doubles: a node's blocks double, its waves at most double,
host time stays; so no term more than doubles.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trappm_ray import devices
from trappm_ray.physics.graph_walk import kept, walk
from trappm_ray.physics.loss import loss_kernels
from trappm_ray.physics.roofline import BACKWARD_FACTOR, roofline
from trappm_ray.physics.units import FREE, MATMUL_OPS, TENSOR

# Host time per forward kernel of eager PyTorch (:func:`launches`), in us: an inference pass's, a
# training forward's (recording autograd's graph too), the backward's, what autocast adds to it (a
# backward node per cast: TF32 rows 51 us, AMP 70-74), and what a checkpointed kernel adds (its
# forward again inside the backward): medians over models of the H200 campaign's host-bound rows,
# phases timed by CUDA events on torch 2.11 (``evaluate/phases.py``). Older stacks are slower
# (RTX 3090 timm labels: 168 us a training kernel); a predictor passes its own (``launch``).
HOST_US = {"inference": 33.0, "forward": 49.0, "backward": 51.0, "autocast": 20.0, "recompute": 130.0}
# Per foreach list op: a dispatch plus torch.optim's Python over the lists (us; host-bound AdamW
# steps of 150-210 tensors: 2.9-5.0 ms on the H200 campaign, evaluate/phases.py).
FOREACH_HOST_US, FOREACH_HOST_US_PER_TENSOR = 20.0, 2.0
# torch.optim's foreach implementations (torch 2.x, CUDA default): (list ops, fp32 tensor passes
# per parameter, each a read or a write of 4 bytes). SGD+momentum: buf*=m; buf+=g; p-=lr*buf.
# Adam: m.lerp_(g); v*=b2; v+=g*g; s=sqrt(v); s/=c; s+=eps; p-=lr*m/s. AdamW adds p*=1-lr*wd.
# Adadelta (public measurements use it): v*=r; v+=g*g; s=sqrt(v+eps); d=sqrt(a+eps)/s*g;
# a*=r; a+=d*d; p-=lr*d.
OPTIMIZER_PASSES = {"none": (0, 0), "sgd": (1, 3), "sgd-momentum": (3, 8), "adam": (7, 18), "adamw": (8, 20),
                    "adadelta": (11, 27)}
FUSED_OPTIMIZER_PASSES = {"adam": (1, 7), "adamw": (1, 7)}  # fused=True: one kernel over p, g, m, v
AMP_UNSCALE = (1, 2)  # fp16's GradScaler: each fp32 gradient read, checked, scaled and written once
# multi_tensor_apply launches a kernel per full table: at most this many tensors or blocks of this many elements each.
FOREACH_TENSORS, FOREACH_BLOCKS, FOREACH_BLOCK_ELEMS = 110, 320, 65536
# A GEMM or convolution whose output tiles leave block slots idle is split along its reduction
# (split-K: cuBLAS's and cuDNN's heuristics, CUTLASS's ``splitk`` kernels), each slice of at least
# this many products per output a block of its own, the partial tiles summed by a second pass.
SPLIT_K_MIN = 256
TENSORS_PER_WEIGHTED_NODE = 2  # a weight and a bias (or a norm's scale and shift)
MODES = {"train_step_ms": "train", "inference_ms": "infer"}  # a target's mode of step_time


@dataclass(frozen=True)
class Efficiency:
    """The share of the spec sheet's peaks a kernel reaches when it fills the GPU, and how work
    splits into thread blocks. Figures of the order vendor libraries publish, not fitted here.

    Attributes:
        tensor: of the tensor peak for a large GEMM/convolution (cuBLAS/cuDNN: 70-85%).
        tf32_matmul: of the TF32 peak for a matrix product in ``tf32``, at least the FP32 units'
            rate (measured: ``docs/results-campaign.md``; bf16 GEMMs there read ``tensor``'s).
        vector: of the vector peak for arithmetic off the tensor cores.
        bandwidth: of the memory bandwidth a streaming kernel reaches (STREAM-like: 80-90%).
        kernel_us: the least device time of any kernel (launch latency, one short wave).
        tile: output elements per thread block of a GEMM or convolution (a 128 x 128 tile).
        vector_block: elements per thread block of an elementwise or reduction kernel.
        tensor_blocks_per_sm, vector_blocks_per_sm: blocks resident on one SM at once.
    """

    tensor: float = 0.75
    tf32_matmul: float = 0.4
    vector: float = 0.7
    bandwidth: float = 0.8
    kernel_us: float = 3.0
    tile: int = 128 * 128
    vector_block: int = 2048
    tensor_blocks_per_sm: int = 1
    vector_blocks_per_sm: int = 8


@dataclass(frozen=True)
class Setting:
    """What a step runs besides the graph.

    Attributes:
        precision: a key of :data:`trappm_ray.physics.roofline.PRECISIONS`.
        optimizer: a key of :data:`OPTIMIZER_PASSES`.
        fused_optimizer: torch.optim's ``fused=True`` (Adam/AdamW) instead of the foreach default.
        recompute: activation checkpointing of the whole network (one more forward in backward).
        grad_accum: forward/backward passes per optimizer step.
    """

    precision: str = "amp-fp16"
    optimizer: str = "sgd-momentum"
    fused_optimizer: bool = False
    recompute: bool = False
    grad_accum: int = 1

    @classmethod
    def of(cls, setting: dict) -> Setting:
        """From a resolved option dict (unknown keys ignored, missing ones at the defaults)."""
        return cls(precision=setting.get("precision") or cls.precision, optimizer=setting.get("optimizer")
                   or cls.optimizer, fused_optimizer=bool(setting.get("fused_optimizer")),
                   recompute=bool(setting.get("recompute")), grad_accum=int(setting.get("grad_accum") or 1))


@dataclass(frozen=True)
class StepEstimate:
    """One step of a graph on a device, in ms, and the kernels it issues.

    Attributes:
        total_ms: the step as host and GPU run it together (the queue).
        device_ms, host_ms: the GPU's busy time and the host's issue time, each alone.
        forward_ms, backward_ms, optimizer_ms: the device time of each phase.
        kernels: kernels issued.
        fill: device-time-weighted mean fill of the forward kernels (1 = every SM busy).
        forward_host_ms, backward_host_ms: the host's issue time of the forward and the backward pass.
        host_us, compute_us, memory_us, least_us: per entry in issue order (a graph node's kernel,
            its backward's two, an optimizer list op), the host's issue time, the compute time (at
            its fill), the memory time and the least device time its kernels take (us).
    """

    total_ms: float
    device_ms: float
    host_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    kernels: int
    fill: float
    forward_host_ms: float = 0.0
    backward_host_ms: float = 0.0
    host_us: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))
    compute_us: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))
    memory_us: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))
    least_us: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))

    @classmethod
    def of(cls, host_us: np.ndarray, compute_us: np.ndarray, memory_us: np.ndarray, least_us: np.ndarray,
           phases: tuple[int, int, int], fill: float) -> StepEstimate:
        """From per-entry sequences; ``phases`` counts the forward, backward and optimizer entries."""
        device = np.maximum(np.maximum(compute_us, memory_us), least_us)
        f, b, _ = phases
        return cls(queue_ms(host_us, device), float(device.sum()) / 1e3, float(host_us.sum()) / 1e3,
                   float(device[:f].sum()) / 1e3, float(device[f:f + b].sum()) / 1e3,
                   float(device[f + b:].sum()) / 1e3, len(device), fill, float(host_us[:f].sum()) / 1e3,
                   float(host_us[f:f + b].sum()) / 1e3, host_us, compute_us, memory_us, least_us)

    @property
    def forward_span_ms(self) -> float:
        """The forward pass's device or (if longer) issue time: what another stream can hide behind."""
        return max(self.forward_ms, self.forward_host_ms)

    @property
    def backward_span_ms(self) -> float:
        """How long the backward pass lasts (:attr:`forward_span_ms`)."""
        return max(self.backward_ms, self.backward_host_ms)

    @property
    def device_us(self) -> np.ndarray:
        """Per kernel, its device time at full clock."""
        return self.at_clock(1.0)

    def at_clock(self, clock: float) -> np.ndarray:
        """Per kernel, its device time with the SMs at ``clock`` x their full clock (compute
        stretches; memory traffic, on its own clock, does not)."""
        return np.maximum(np.maximum(self.compute_us / clock, self.memory_us), self.least_us)

    def with_device_scale(self, scale: float) -> float:
        """The step in ms with every kernel's device time times ``scale`` (host unchanged)."""
        return queue_ms(self.host_us, self.device_us * scale)


# How far a learned answer may move the step model's GPU kernel times (a factor each way): the
# spread of measured / step-model time over the public sweeps (docs/results-step-model.md) with
# room to spare; beyond it the learned answer is not trusted to set the device's efficiency.
DEVICE_SCALE = (0.25, 4.0)


def device_scale(est: StepEstimate, measured_ms: float, bounds: tuple[float, float] = DEVICE_SCALE) -> float:
    """The factor on the device's kernel times that makes ``est`` read ``measured_ms`` (a learned
    answer, a measurement), within ``bounds``: the correction a learned model may make to the
    GPU's efficiency, never to the host's issue time nor beyond the bounds."""
    lo, hi = bounds
    if est.with_device_scale(lo) >= measured_ms:
        return lo
    if est.with_device_scale(hi) <= measured_ms:
        return hi
    # The step is the latest of the kernels' issue time + the device time from there on: a
    # maximum of lines in the scale, so it reaches the measurement where the first line does.
    issue = np.cumsum(est.host_us)
    after = np.cumsum(est.device_us[::-1])[::-1]
    grows = after > 0
    return float(np.clip(np.min((measured_ms * 1e3 - issue[grows]) / after[grows]), lo, hi))


def fill(elements: np.ndarray, per_block: np.ndarray, blocks_per_sm: np.ndarray, sms: int | None) -> np.ndarray:
    """Share of the GPU's block slots a kernel's waves keep busy: ``blocks / (waves x slots)``."""
    if not sms:
        return np.ones_like(elements, dtype=np.float64)
    blocks = np.maximum(np.ceil(elements / per_block), 1.0)
    slots = sms * blocks_per_sm
    return blocks / (np.ceil(blocks / slots) * slots)


def split_k(out_elems: np.ndarray, reduction: np.ndarray, tile: int, slots: int | None) -> np.ndarray:
    """Slices a GEMM's reduction is split into (1: not split): the largest power of two whose
    blocks fit the slots its output tiles leave idle, none shorter than :data:`SPLIT_K_MIN` (a
    64 x 16,384 by 16,384 x 1,024 MatMul, 4 tiles on 108 SMs, would read 27x its time unsplit).
    Powers of two keep throughput from falling as the batch doubles: the blocks never fall."""
    if not slots:
        return np.ones_like(out_elems, dtype=np.float64)
    tiles = np.maximum(np.ceil(out_elems / tile), 1.0)
    most = np.maximum(np.minimum(slots / tiles, np.floor(reduction / SPLIT_K_MIN)), 1.0)
    return 2.0 ** np.floor(np.log2(most))


def queue_ms(host_us: np.ndarray, device_us: np.ndarray) -> float:
    """When the last of a sequence of kernels ends: kernel k is issued after the host's time for
    kernels 0..k and starts when issued and the previous one is done."""
    if len(host_us) == 0:
        return 0.0
    issue = np.cumsum(host_us)
    after = np.cumsum(device_us[::-1])[::-1]  # device time of kernels k..n
    return float(np.max(issue + after)) / 1e3


def node_terms(graph, spec: devices.DeviceSpec, precision: str, eff: Efficiency = Efficiency(),
               fused_attention: bool | str = True
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per graph node of the forward pass: whether it launches a kernel, its compute time at its
    fill of the SMs, its memory time, a restored BatchNorm's memory time, the memory time of
    autocast's copies of its inputs (us), and its fill."""
    est = roofline(graph, spec, precision, "infer", fused_attention=fused_attention)
    # a kernel per op eager PyTorch runs: a node the memory walk finds allocating a tensor, not a
    # view, nor a member of a fused pointwise chain (an exported GELU's five nodes are one op),
    # nor scalar arithmetic on shapes (Python computes ``head_dim ** -0.5``, no kernel)
    allocates = walk(graph).real[:graph.num_nodes]
    work = (est.node_class != FREE) & (est.flops + est.bytes > 0) & allocates
    tensor = est.node_class == TENSOR
    out = np.asarray(graph.out_elems, np.float64)
    # products per output element: a GEMM's reduction length (a convolution's C_in x k_h x k_w)
    reduction = np.where(tensor, est.flops / 2 / np.maximum(out, 1.0), 1.0)
    # a recurrent layer's steps run one after another, each on its own few outputs: not split
    splittable = tensor & ~np.isin(np.asarray(graph.ops), ["LSTM", "GRU", "RNN"])
    splits = np.where(splittable, split_k(out, reduction, eff.tile,
                                      spec.sm_count and spec.sm_count * eff.tensor_blocks_per_sm), 1.0)
    share = fill(out * splits, np.where(tensor, eff.tile, eff.vector_block),
                 np.where(tensor, eff.tensor_blocks_per_sm, eff.vector_blocks_per_sm), spec.sm_count)
    tf32 = tensor & np.isin(graph.ops, list(MATMUL_OPS)) & (precision == "tf32")
    tf32_share = max(eff.tf32_matmul, eff.vector * est.peak_vector / est.peak_tensor)
    peak_share = np.where(tensor & (est.peak >= est.peak_tensor), np.where(tf32, tf32_share, eff.tensor), eff.vector)
    # tiles fill the SMs or leave them idle; a kernel's traffic (split-K GEMMs, many blocks over
    # weights) streams at the achievable bandwidth whatever its output size
    compute = est.compute_ms * 1e3 / peak_share / share
    partials = np.where(splits > 1, 2 * 4 * splits * out, 0.0)  # fp32 partial tiles written, read
    memory = (est.memory_ms * 1e3 + partials / est.bandwidth * 1e6) / eff.bandwidth
    cast = est.cast_ms * 1e3 / eff.bandwidth
    bn = est.bn_ms * 1e3 / eff.bandwidth
    return work, compute, memory, bn, cast, share


def forward_kernels(graph, spec: devices.DeviceSpec, precision: str, eff: Efficiency = Efficiency(),
                    fused_attention: bool | str = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per forward kernel of ``graph`` (restored BatchNorms and autocast's copies as kernels of
    their own), its compute time at its fill of the SMs and its memory time (us; the kernel
    takes the larger, at least ``eff.kernel_us``), whether the host issues it at its per-kernel
    rate (an autocast copy is dispatched inside its op's call, in C++: no host time of its own),
    and the kernels' device-time-weighted mean fill."""
    work, compute, memory, bn, cast, share = node_terms(graph, spec, precision, eff, fused_attention)
    compute, memory, bn, cast = compute[work], memory[work], bn[work], cast[work]
    bn_us, cast_us = bn[bn > 0], cast[cast > 0]
    node = np.maximum(np.maximum(compute, memory), eff.kernel_us)
    mean_fill = float(np.average(share[work], weights=node)) if node.sum() > 0 else 1.0
    issued = np.concatenate([np.ones(len(compute) + len(bn_us)), np.zeros(len(cast_us))])
    return (np.concatenate([compute, np.zeros(len(bn_us) + len(cast_us))]),
            np.concatenate([memory, bn_us, cast_us]), issued, mean_fill)


def launches(graph, spec: devices.DeviceSpec, precision: str) -> int:
    """Kernels the forward pass of ``graph`` issues from Python as the step model counts them
    (the host's issue time is per such kernel): what a measured time per kernel is measured against."""
    return int(forward_kernels(graph, spec, precision)[2].sum())


def node_device_us(graph, spec: devices.DeviceSpec, precision: str, eff: Efficiency = Efficiency(),
                   fused_attention: bool | str = True) -> np.ndarray:
    """Per graph node, the device time of its forward kernel (us; 0 for a node that launches none,
    a restored BatchNorm's kernel added to its Conv's): what a per-layer breakdown sums."""
    work, compute, memory, bn, cast, _ = node_terms(graph, spec, precision, eff, fused_attention)
    own = np.maximum(np.maximum(compute, memory), eff.kernel_us)
    extra = sum(np.where(t > 0, np.maximum(t, eff.kernel_us), 0.0) for t in (bn, cast))
    return np.where(work, own + extra, 0.0)


def optimizer_kernels(params: float, tensors: int, setting: Setting, bandwidth: float,
                      eff: Efficiency = Efficiency()) -> tuple[np.ndarray, np.ndarray]:
    """(host us, memory us) per list op of the optimizer step (and AMP's unscale pass); each op
    launches a kernel per table of tensors, so it lasts at least that many kernels' least time."""
    table = FUSED_OPTIMIZER_PASSES if setting.fused_optimizer else OPTIMIZER_PASSES
    ops, passes = table.get(setting.optimizer, OPTIMIZER_PASSES[setting.optimizer])
    steps = [(passes / ops if ops else 0.0)] * ops
    if setting.precision == "amp-fp16" and ops:  # bf16's range needs no GradScaler; nobody runs one
        steps.append(float(AMP_UNSCALE[1]))
    if not steps or params <= 0:
        return np.zeros(0), np.zeros(0)
    launches = max(1, math.ceil(tensors / FOREACH_TENSORS),
                   math.ceil(params / (FOREACH_BLOCK_ELEMS * FOREACH_BLOCKS)))
    host = np.full(len(steps), FOREACH_HOST_US + FOREACH_HOST_US_PER_TENSOR * tensors)
    memory = np.array([max(p * 4 * params / (bandwidth * eff.bandwidth) * 1e6, launches * eff.kernel_us)
                       for p in steps])
    return host, memory


def bandwidth_of(spec: devices.DeviceSpec) -> float:
    """The device's memory bandwidth in B/s (roofline's ``device_rates`` refuses a device without)."""
    if not spec.memory_bw_gbs:
        raise ValueError(f"device {spec.slug!r} has no sourced memory bandwidth: no step model")
    return spec.memory_bw_gbs * 1e9


def step_time(graph, spec: devices.DeviceSpec, setting: Setting | dict = Setting(), mode: str = "train",
              host_us: dict[str, float] | None = None, eff: Efficiency = Efficiency(),
              fused_attention: bool | str = True) -> StepEstimate:
    """One training step (``mode="train"``: forward, backward, optimizer) or inference pass
    (``"infer"``) of ``graph`` on ``spec``, as the module docstring describes.

    Args:
        graph: a featurized :class:`~trappm_ray.graph.featurize.Graph` at the step's batch.
        spec: the GPU.
        setting: a :class:`Setting` or a resolved option dict.
        host_us: per graph kernel, any of :data:`HOST_US`'s figures (the others its defaults).
        eff: the kernels' achievable shares of the peaks.
        fused_attention: attention scores stay on chip (PyTorch 2's fused attention); False:
            eager, ``units.SOFTMAX``: Megatron-LM's fused softmax (:func:`~trappm_ray.physics.roofline.roofline`).

    Raises:
        ValueError: a precision the device has no sourced peak for.
    """
    s = setting if isinstance(setting, Setting) else Setting.of(setting)
    host = {**HOST_US, **(host_us or {})}
    # one prediction asks for the same step several times (the batch move, power, a setting move)
    return kept(graph, ("step_time", spec, s, mode, tuple(sorted(host.items())), eff, fused_attention),
                lambda: _step_time(graph, spec, s, mode, host, eff, fused_attention))


def _step_time(graph, spec: devices.DeviceSpec, s: Setting, mode: str, host: dict[str, float], eff: Efficiency,
               fused_attention: bool | str) -> StepEstimate:
    f_comp, f_mem, issued, mean_fill = forward_kernels(graph, spec, s.precision, eff, fused_attention)
    f_host, f_least = host["inference" if mode == "infer" else "forward"] * issued, np.full(len(f_comp), eff.kernel_us)
    if mode == "infer":
        return StepEstimate.of(f_host, f_comp, f_mem, f_least, (len(f_comp), 0, 0), mean_fill)
    if mode != "train":
        raise ValueError(f"mode must be 'train' or 'infer', got {mode!r}")
    # backward: input and weight gradients, each about the forward's work, in reverse order
    b_comp, b_mem, b_least = (x * BACKWARD_FACTOR for x in (f_comp[::-1], f_mem[::-1], f_least))
    b_host = (host["backward"] + host["autocast"] * s.precision.startswith("amp")) * issued[::-1]
    if s.recompute:  # each checkpointed segment runs its forward again inside the backward,
        # issued from the autograd engine, recording its graph anew (the H200 campaign's
        # host-bound steps: +1.9-2.5x with every block checkpointed)
        b_comp, b_mem, b_host, b_least = (np.concatenate([f, b]) for f, b in (
            (f_comp, b_comp), (f_mem, b_mem), (host["recompute"] * issued, b_host), (f_least, b_least)))
    # the loss (:mod:`~trappm_ray.physics.loss`) ends the forward pass and starts the backward
    lf, lb = loss_kernels(graph, s.precision, bandwidth_of(spec) * eff.bandwidth, eff.kernel_us, host)
    f_host, f_comp, f_mem, f_least = (np.concatenate([a, x]) for a, x in zip((f_host, f_comp, f_mem, f_least), lf))
    b_host, b_comp, b_mem, b_least = (np.concatenate([x, a]) for a, x in zip((b_host, b_comp, b_mem, b_least), lb))
    params = float(graph.static.get("params", np.sum(graph.params)))
    tensors = TENSORS_PER_WEIGHTED_NODE * int(np.count_nonzero(np.asarray(graph.params) > 0))
    o_host, o_mem = optimizer_kernels(params, tensors, s, bandwidth_of(spec), eff)
    accum = max(int(s.grad_accum), 1)
    return StepEstimate.of(np.concatenate([*([f_host, b_host] * accum), o_host]),
                           np.concatenate([*([f_comp, b_comp] * accum), np.zeros(len(o_mem))]),
                           np.concatenate([*([f_mem, b_mem] * accum), o_mem]),
                           np.concatenate([*([f_least, b_least] * accum), np.full(len(o_mem), eff.kernel_us)]),
                           (accum * len(f_comp), accum * len(b_comp), len(o_mem)), mean_fill)


__all__ = ["DEVICE_SCALE", "HOST_US", "MODES", "OPTIMIZER_PASSES", "FUSED_OPTIMIZER_PASSES", "Efficiency", "Setting", "StepEstimate",
           "device_scale", "fill", "split_k", "launches", "node_terms", "node_device_us", "queue_ms", "forward_kernels", "optimizer_kernels", "step_time"]
