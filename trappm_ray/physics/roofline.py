"""Roofline time of a model on a device: per operator, the larger of its arithmetic over the
device's peak and its memory traffic over the memory bandwidth.

The roofline model (S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009) bounds a kernel's time below
by ``max(FLOPs / peak FLOP/s, bytes / bandwidth)``. Summed over an operator graph it is the time
a step would take if every kernel ran at the device's peak for its limiting resource: a physical
floor. A measured step below it means a peak in the spec table is wrong, the graph counts work
the framework skipped, or the measurement is wrong; predictors clamp their output to at least the
roofline total (``trappm_ray/evaluate/gpu.py``). Launch latency is ignored, so real steps at
small batch sizes sit far above it; learning that gap is left to the regressors.

Counting rules (per node, forward pass); every choice errs low, as a floor must:

* FLOPs: ``2 * MACs`` for the matmul class (Conv, Gemm, MatMul, Einsum, RNNs); for every other
  op the featurizer's ``macs``, already a cost per output element (1 for Add/ReLU; softmax 5,
  layer norm 8, ...: ``ELEMENT_COST`` in ``graph/featurize.py``; the window for pooling).
* Peak: the tensor-core peak of the precision (``devices.peak_flops``) for the matmul class at
  ``amp-*``/``fp16``/``bf16``/``tf32``; the vector peak (FP32, FP16 vector units where listed,
  FP64 at fp64) for the rest, depthwise and thin grouped convolutions included (cuDNN runs them
  on the CUDA cores). ``fp32`` is PyTorch's default since 1.12: convolutions get the TF32 tensor
  peak where the device has one (``cudnn.allow_tf32`` defaults to True) but matrix products
  (Gemm, MatMul, Einsum, RNNs) the FP32 vector peak (``cuda.matmul.allow_tf32`` defaults to
  False); ``tf32`` lets both use TF32; ``fp32-strict`` neither (both flags off, as for
  reproducibility: the physics' reading of such measurements, not an option users ask for).
  Measured, not assumed: NeuSight's fp32 LM runs on the A100 take 0.72-0.77x the V100's time, the
  ratio of the FP32 peaks (19.5 / 14 TFLOPS), not of TF32 to FP32 (11x). On ROCm both get CDNA's FP32 matrix rate (2x vector; rocBLAS uses it).
  A 3x3 stride-1 Conv off the tensor cores may run as Winograd F(4x4, 3x3) (Lavin & Gray,
  CVPR 2016): 4x fewer multiplies, so its FLOPs count a quarter. Which unit runs a node is
  :mod:`trappm_ray.physics.units`' answer: a Gemm/MatMul with an odd inner or output dimension
  gets the vector peak in every precision (``units.misaligned``).
* Bytes: data inputs + outputs at the activation size (4 B at fp32/tf32, 2 B at fp16/bf16)
  plus weights (autocast: the fp32 master read and, for the matmul class, a half copy written
  and read: 8 B per parameter). Under autocast each tensor has the dtype autocast's rules give
  it (``graph_walk.Walk.dtypes``: the image, embedding rows, LayerNorm outputs and the residual
  Adds they feed stay fp32, GEMM outputs are half), and every cast of an input to its op's dtype
  is a copy kernel of its own (read, then written at the new size) that a floor counts; counted
  all at 2 B, the step model read the H200 campaign's amp-bf16 training steps at their largest
  batch at 0.53x of the measured time for BERT-base, 0.36x for Swin-T and 0.69x for ViT-B/16
  (now 0.65x, 0.48x, 0.87x; GPT-2 1.0x -> 1.04-1.15x). Tensors follow the
  memory model's walk (``graph_walk.walk``): views move nothing, a pointwise chain with one data
  input (an exported GELU) is one kernel, a bias Add after a weighted MatMul is the GEMM's
  epilogue; attention scores of fused attention stay on chip (``units.attention_scores``); under
  a fusing compiler (``compiled``) vector ops move nothing.
* A BatchNorm folded into its Conv by an eval-mode export is put back (eager PyTorch runs it).

Training: backward = ``BACKWARD_FACTOR`` (2) x forward per node (input and weight gradients); the
optimizer moves ``OPTIMIZER_BYTES`` per parameter (fp32 state), plus AMP's unscale pass.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from trappm_ray import devices
from trappm_ray.physics.folded_norm import guess_folded_norm
from trappm_ray.physics.autocast import FP32, FP32_OPS, FP32_RESULT_OPS
from trappm_ray.physics.graph_walk import kept, walk
from trappm_ray.physics.units import (FREE, MATMUL_OPS, SOFTMAX, TENSOR, VECTOR, attends, attention_scores,
                                      kept_on_chip, misaligned, node_classes)

log = logging.getLogger(__name__)

WINOGRAD_FACTOR = 4.0  # F(4x4, 3x3): 36 multiplies for 16 outputs instead of 144
ROCM_FP32_MATRIX = 2.0  # CDNA FP32 matrix peak / FP32 vector peak (devices.csv notes: no column)
BACKWARD_FACTOR = 2.0  # backward ~ 2x forward: gradients w.r.t. inputs and w.r.t. weights
# Optimizer step, bytes per parameter with fp32 state: read param + grad (+ each state tensor),
# write param (+ each state tensor). SGD momentum: p, g, buf read; p, buf written.
OPTIMIZER_BYTES = {"none": 0, "sgd": 12, "sgd-momentum": 20, "adam": 28, "adamw": 28}
AMP_UNSCALE_BYTES = 8  # GradScaler.unscale_: every fp32 gradient read and written once
BN_FLOPS_PER_ELEM = 2  # a restored (folded) BatchNorm: scale and shift per element

# precision -> (tensor peak key for devices.peak_flops, activation bytes, weight bytes per
# parameter of a matmul-class node, of any other node)
PRECISIONS = {
    "fp32": ("tf32", 4, 4, 4), "tf32": ("tf32", 4, 4, 4), "fp32-strict": ("fp32", 4, 4, 4),
    "amp-fp16": ("amp-fp16", 2, 8, 4), "amp-bf16": ("bf16", 2, 8, 4),
    "fp16": ("fp16", 2, 2, 2), "bf16": ("bf16", 2, 2, 2), "fp64": ("fp64", 8, 8, 8),
}
FEATURE_NAMES = ("log_compute_us", "log_memory_us", "log_roofline_us", "log2_intensity_over_ridge",
                 "compute_bound")


@dataclass
class RooflineEstimate:
    """Roofline times of one graph on one device (forward pass per node; totals in ms).

    Attributes:
        node_class: per node FREE (0), VECTOR (1) or TENSOR (2).
        flops, bytes, compute_ms, memory_ms, node_ms: per node forward FLOPs, bytes and times
            (``node_ms``: their maximum, plus a restored BatchNorm's and autocast's copies' times).
        cast_ms: per node the time of autocast's copies of its inputs (memory-bound kernels).
        bn_ms: per node the time of a restored BatchNorm after it (a memory-bound kernel).
        forward_ms, backward_ms, optimizer_ms, total_ms: totals; ``total_ms`` (their sum) is the
            floor of one step in ``mode`` (backward and optimizer are 0 for inference).
        compute_bound_share: share of ``forward_ms`` spent in compute-bound nodes.
        peak: per node the peak FLOP/s its compute time is counted at.
        peak_tensor, peak_vector, bandwidth: the device figures used (FLOP/s, FLOP/s, B/s).
    """

    node_class: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    compute_ms: np.ndarray
    memory_ms: np.ndarray
    node_ms: np.ndarray
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    total_ms: float
    compute_bound_share: float
    peak: np.ndarray
    peak_tensor: float
    peak_vector: float
    bandwidth: float
    mode: str
    precision: str
    device: str
    cast_ms: np.ndarray
    bn_ms: np.ndarray

    @property
    def kernels(self) -> int:
        """The graph's kernels: nodes that do work (views and shape arithmetic launch none)."""
        return int(((self.node_class > 0) & (self.bytes + self.flops > 0)).sum())


def runs_as(spec: devices.DeviceSpec, precision: str) -> str:
    """The precision ``spec`` runs a request for ``precision`` in: TF32 is fp32 with its matrix
    products on TF32 tensor cores, so on a GPU without them (before Ampere, AMD's CDNA2) PyTorch's
    ``allow_tf32`` changes nothing and the step is fp32's, to the kernel. Any other: itself."""
    return "fp32" if precision == "tf32" and not spec.peak_tf32_tensor_tflops else precision


def precision_refusal(spec: devices.DeviceSpec, precision: str) -> str | None:
    """Why ``spec`` cannot run ``precision`` (None: it can): no bf16 units, or no sourced peak."""
    if precision in ("amp-bf16", "bf16") and not spec.peak_bf16_tensor_tflops:
        return (f"{spec.name} cannot run {precision}: it has no bf16 units (NVIDIA Ampere or newer, "
                f"AMD CDNA2 or newer); use amp-fp16 or fp32")
    try:
        device_rates(spec, precision)
    except ValueError as e:
        return str(e)
    return None


def device_rates(spec: devices.DeviceSpec, precision: str) -> tuple[float, float, float]:
    """``(tensor peak, vector peak, bandwidth)`` in FLOP/s, FLOP/s and B/s for ``precision``.

    Args:
        spec: the device (``trappm_ray.devices``).
        precision: a key of :data:`PRECISIONS`.

    Raises ValueError for an unknown precision or a device without a sourced peak or bandwidth.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {sorted(PRECISIONS)}")
    if not spec.memory_bw_gbs:
        raise ValueError(f"device {spec.slug!r} has no sourced memory bandwidth: no roofline")
    key = PRECISIONS[precision][0]
    if precision in ("amp-fp16", "fp16") and spec.peak_fp16_tflops:
        vector = spec.peak_fp16_tflops * 1e12  # FP16 vector units (P100's half2 rate)
    elif precision == "fp64" or spec.peak_fp32_tflops:
        vector = devices.peak_flops(spec, "fp64" if precision == "fp64" else "fp32")
    else:
        raise ValueError(f"device {spec.slug!r} has no sourced FP32 peak: no roofline")
    tensor = max(devices.peak_flops(spec, key), vector)
    if precision in ("fp32", "fp32-strict") and spec.kind == "rocm":
        tensor = max(tensor, ROCM_FP32_MATRIX * vector)
    return tensor, vector, spec.memory_bw_gbs * 1e9


def _forward_work(graph, precision: str, cls: np.ndarray, folded: np.ndarray, fused_attention: bool | str,
                  compiled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node forward FLOPs, bytes, and the FLOPs/bytes of restored BatchNorms.

    Tensors follow the memory model's walk (``graph_walk.walk``): views alias their base and
    move nothing, a chain of pointwise ops with one data input (an exported GELU's five nodes)
    reads its input and writes its result once, as the single kernel PyTorch runs for it, and
    shape arithmetic on scalars allocates nothing. A bias Add after a MatMul with weights is the
    GEMM's epilogue (``torch.addmm``; ONNX exporters split ``nn.Linear`` on 3-D inputs in two).
    """
    _, act, w_tensor, w_other = PRECISIONS[precision]
    tensors = walk(graph)
    n = len(cls)
    macs = np.asarray(graph.macs, np.float64)
    params = np.asarray(graph.params, np.float64)
    flops = np.where(cls == TENSOR, 2.0 * macs, macs)
    flops[cls == FREE] = 0.0
    out_elems = np.asarray(graph.out_elems, np.float64)
    casts = np.zeros(n)
    if precision.startswith("amp"):  # autocast's dtypes: fp32 streams between half GEMMs, and copies
        typed = tensors.dtypes(FP32, act)
        elem_bytes, casts = typed.bytes.copy(), (typed.casts * (not compiled))
    else:
        elem_bytes = np.full(n + 1, float(act))  # index n: the data input
        if act == 2:  # pure half: these ops' results in fp32
            elem_bytes[[i for i, op in enumerate(graph.ops) if op in FP32_OPS or op in FP32_RESULT_OPS]] = 4.0
    on_chip = kept_on_chip(graph, fused_attention, tensors, cls)
    softmax = attention_scores(graph, tensors, cls) & np.array([op == "Softmax" for op in graph.ops], bool)
    if fused_attention == SOFTMAX:  # the scores stored, the scale and masks fused into the softmax,
        elem_bytes[:n][softmax] = act  # which writes half-precision probabilities
    stored = np.append(tensors.real[:n] & ~on_chip, True)
    sized, in_memory = (tensors.elems * elem_bytes).tolist(), stored.tolist()  # lists: cheap per element
    reads = np.array([sum(sized[p] for p in ps if in_memory[p]) for ps in tensors.preds], np.float64)
    moved = np.where(tensors.real[:n], reads, 0.0) + np.where(stored[:n], out_elems * elem_bytes[:n], 0.0)
    one = [ps[0] if len(ps) == 1 and ps[0] < n else -1 for ps in tensors.preds]
    moved[[i for i, op in enumerate(graph.ops) if op == "Add" and params[i] > 0 and one[i] >= 0
           and cls[one[i]] == TENSOR and params[one[i]] > 0]] = 0.0  # bias in the GEMM epilogue
    if compiled:  # a compiler may fuse every vector op into a neighbouring kernel's prologue/epilogue
        moved[cls == VECTOR] = 0.0
    wbytes = params * np.where(cls == TENSOR, w_tensor, w_other)
    moved += np.where(cls == FREE, 0.0, wbytes)
    if fused_attention == SOFTMAX:  # the scores read, the probabilities written; dropout reads
        flops[on_chip], moved[on_chip] = 0.0, 0.0  # those and writes them with a mask byte each
        moved[softmax] = (4 * act + 1) * out_elems[softmax]
    bn_flops = folded * out_elems * BN_FLOPS_PER_ELEM
    bn_bytes = folded * out_elems * 2 * elem_bytes[:n] * (not compiled)  # read conv output, write result
    return flops, moved, np.stack([bn_flops, bn_bytes, casts])


def _work(graph, precision: str, restore_folded_bn: bool, folded_norm: np.ndarray | None,
          fused_attention: bool | str, compiled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Node classes and :func:`_forward_work`, which depend on the graph and the setting but not
    on the device or the mode: kept in ``graph.derived`` (read-only), as one prediction asks for
    the same graph's roofline on several devices and in both modes."""
    fused_attention = fused_attention if attends(graph) else False  # one work for all where nothing attends

    def work() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cls = node_classes(graph)
        folded = np.zeros(len(cls), bool) if not (restore_folded_bn and len(cls)) else np.asarray(
            guess_folded_norm(graph) if folded_norm is None else folded_norm, bool)
        found = (cls, *_forward_work(graph, precision, cls, folded, fused_attention, compiled))
        for a in found:
            a.flags.writeable = False
        return found

    if folded_norm is not None:  # a caller's own mask: not the graph's to keep
        return work()
    return kept(graph, ("roofline_work", precision, restore_folded_bn, fused_attention, compiled), work)


def roofline(graph, spec: devices.DeviceSpec, precision: str = "amp-fp16", mode: str = "train",
             optimizer: str = "sgd-momentum", restore_folded_bn: bool = True,
             folded_norm: np.ndarray | None = None, fused_attention: bool | str = True,
             compiled: bool = False) -> RooflineEstimate:
    """The roofline floor of one step of ``graph`` on ``spec`` (see the module docstring).

    Args:
        graph: a :class:`trappm_ray.graph.featurize.Graph` at the batch size of the step.
        spec: the device.
        precision: a key of :data:`PRECISIONS` (``amp-fp16`` = torch autocast to float16).
        mode: ``train`` (forward + backward + optimizer step) or ``infer`` (forward only).
        optimizer: a key of :data:`OPTIMIZER_BYTES` (timm's ``sgd`` is SGD with momentum).
        restore_folded_bn: add back the BatchNorms an eval-mode export folded into Convs.
        folded_norm: per node mask of such Convs; default: ``guess_folded_norm(graph)``.
        fused_attention: attention scores stay on chip (``units.attention_scores``), as with
            PyTorch 2's fused attention; the default, since a floor must not count traffic a
            fused kernel avoids. Pass False for eager PyTorch 1.x, which materializes them,
            ``units.SOFTMAX`` for Megatron-LM's fused scale-mask-softmax and attention dropout.
        compiled: the step runs under a fusing compiler (``torch.compile``): vector ops (and
            restored BatchNorms) are assumed fused into their neighbours and move no memory.

    Returns:
        A :class:`RooflineEstimate`; ``total_ms`` is the floor no real step can go below.
    """
    if mode not in ("train", "infer"):
        raise ValueError(f"mode must be 'train' or 'infer', got {mode!r}")
    if optimizer not in OPTIMIZER_BYTES:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZER_BYTES)}")
    tensor, vector, bw = device_rates(spec, precision)
    cls, flops, moved, (bn_flops, bn_bytes, cast_bytes) = _work(graph, precision, restore_folded_bn, folded_norm,
                                                    fused_attention, compiled)
    if tensor == vector and precision != "fp64":  # off the tensor cores cuDNN may pick Winograd
        attrs = np.asarray(graph.attrs).reshape(-1, 3)
        wino = (cls == TENSOR) & (attrs[:, 0] == 9) & (attrs[:, 1] == 1) & (attrs[:, 2] == 1)
        flops = np.where(wino & np.array([op == "Conv" for op in graph.ops], bool), flops / WINOGRAD_FACTOR, flops)
    peak = np.where((cls == TENSOR) & ~misaligned(graph), tensor, vector)
    if precision == "fp32" and spec.kind != "rocm":
        peak[np.array([op in MATMUL_OPS for op in graph.ops], bool)] = vector
    compute_ms = flops / peak * 1e3
    memory_ms = moved / bw * 1e3
    # A restored BatchNorm is its own (memory-bound) kernel after the Conv: its time adds.
    bn_ms = np.maximum(bn_flops / vector, bn_bytes / bw) * 1e3
    cast_ms = cast_bytes / bw * 1e3  # so are autocast's copies of the node's inputs, before it
    node_ms = np.maximum(compute_ms, memory_ms) + bn_ms + cast_ms
    forward = float(node_ms.sum())
    backward = optimizer_ms = 0.0
    if mode == "train":
        backward = BACKWARD_FACTOR * forward
        amp = AMP_UNSCALE_BYTES if precision.startswith("amp") else 0
        optimizer_ms = float(np.sum(graph.params)) * (OPTIMIZER_BYTES[optimizer] + amp) / bw * 1e3
    bound = compute_ms >= memory_ms
    share = float(node_ms[bound & (flops > 0)].sum() / forward) if forward > 0 else 0.0
    return RooflineEstimate(cls, flops, moved, compute_ms, memory_ms, node_ms, forward, backward,
                            optimizer_ms, forward + backward + optimizer_ms, share, peak, tensor, vector,
                            bw, mode, precision, spec.slug, cast_ms, bn_ms)


def node_features(graph, spec: devices.DeviceSpec, precision: str = "amp-fp16",
                  estimate: RooflineEstimate | None = None) -> np.ndarray:
    """Per node roofline features for a GNN, ``[N, len(FEATURE_NAMES)]`` float32: log1p of the
    compute, memory and roofline times in us, log2 of the arithmetic intensity over the ridge
    point (peak / bandwidth; clipped to +-16, 0 without traffic) and a compute-bound flag.

    Args:
        graph: a :class:`trappm_ray.graph.featurize.Graph`.
        spec: the device.
        precision: a key of :data:`PRECISIONS`.
        estimate: a forward :class:`RooflineEstimate` of the same graph, to skip recomputing it.
    """
    est = estimate or roofline(graph, spec, precision, mode="infer")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (est.flops / est.bytes) / (est.peak / est.bandwidth)
        rel = np.where((est.bytes > 0) & (est.flops > 0), np.log2(ratio), 0.0)
    rel = np.clip(np.nan_to_num(rel), -16.0, 16.0)
    cols = [np.log1p(est.compute_ms * 1e3), np.log1p(est.memory_ms * 1e3), np.log1p(est.node_ms * 1e3),
            rel, (est.compute_ms > est.memory_ms).astype(np.float64)]
    return np.stack(cols, axis=1).astype(np.float32)


__all__ = ["BACKWARD_FACTOR", "FEATURE_NAMES", "OPTIMIZER_BYTES", "PRECISIONS", "WINOGRAD_FACTOR",
           "RooflineEstimate", "device_rates", "node_features", "precision_refusal", "roofline",
           "runs_as"]
