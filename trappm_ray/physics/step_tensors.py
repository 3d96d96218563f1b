"""Every tensor of one PyTorch training step on the memory model's timeline, at any batch.

The structural walk (:mod:`~trappm_ray.physics.graph_walk`) lays out the graph's activations,
saved tensors and temporaries; this module adds what the step holds besides them (master
weights, gradients, optimizer state and its temporaries, the cuBLAS workspace, ZeRO's gathered
layers), scales the batch-dependent ones to a batch, and hands the result to both readers of
it: :func:`~trappm_ray.physics.memory.training_memory`, which sums the bytes live at each step,
and the caching allocator's replay (:mod:`~trappm_ray.physics.allocator`), which places them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trappm_ray.physics.allocator import BLOCK, replay
from trappm_ray.physics.autocast import FP32
from trappm_ray.physics.graph_walk import CAT_G as _G
from trappm_ray.physics.graph_walk import CAT_K as _K
from trappm_ray.physics.graph_walk import CAT_O as _O
from trappm_ray.physics.graph_walk import CAT_S as _S
from trappm_ray.physics.graph_walk import CAT_T as _T
from trappm_ray.physics.graph_walk import CAT_W as _W
from trappm_ray.physics.graph_walk import Walk, checkpoint_segments, kept
from trappm_ray.physics.units import attention_scores

MiB = 2**20
# name -> (bytes of master weights/grads/optimizer state, bytes of an activation by default,
# bytes of what autocast lowers matmuls/convs to or None without autocast)
PRECISIONS = {"fp32": (4, 4, None), "tf32": (4, 4, None), "amp-fp16": (4, 4, 2), "amp-bf16": (4, 4, 2),
              "fp16": (2, 2, None), "bf16": (2, 2, None), "fp64": (8, 8, None)}
# optimizer -> (state tensors per parameter, temporaries per parameter during step() with the
# multi-tensor ("foreach") kernels, PyTorch's CUDA default since 2.0, and with single-tensor
# loops, torch < 2.0, where they are copies of one parameter at a time). torch.optim's defaults
# (no weight decay for SGD and Adam; AdamW's decay in place): SGD updates the momentum buffer
# and, with Nesterov, the gradient in place (no temporary; a single-tensor Nesterov step adds
# out of place); Adam and AdamW hold the list of sqrt(v) (their other intermediates are deleted
# before it). SGD or Adam with weight decay copy the gradient list once more.
OPTIMIZERS = {"none": (0, 0, 0), "sgd": (0, 0, 0), "sgd-momentum": (1, 0, 1), "adam": (2, 1, 1),
              "adamw": (2, 1, 1)}
# cuBLAS workspace PyTorch keeps per handle/stream (CUBLAS_WORKSPACE_CONFIG default on sm80+:
# ":4096:8", 8 chunks of 4 MiB); an assumption about the default, labelled as such in the docs.
CUBLAS_WORKSPACE = 32 * MiB


def zero_shares(zero: int, shards: int) -> tuple[float, float, float]:
    """The share of the weights, the gradients and the optimizer state each GPU keeps under ZeRO
    stage ``zero`` over ``shards`` data-parallel GPUs (Rajbhandari et al., SC 2020): stage 1
    shards the optimizer state, 2 the gradients too, 3 (FSDP) the weights too."""
    w, g, o = (1.0 / shards if zero >= stage else 1.0 for stage in (3, 2, 1))
    return w, g, o


@dataclass(frozen=True)
class StepTensors:
    """Every tensor of one training step at one batch: its category (``graph_walk.CAT_W`` ...),
    bytes (whole blocks), the timeline steps it is live in and, for one kept all step, when the
    first step allocates it (:func:`~trappm_ray.physics.allocator.replay`)."""

    cat: np.ndarray
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    first: np.ndarray
    steps: int


class StepLayout:
    """A training step's tensors at any batch (their layout on the timeline does not depend on
    it) and the reserved memory the caching allocator maps for them."""

    def __init__(self, graph, walked: Walk, precision: str, optimizer: str, grads_set_to_none: bool, foreach: bool,
                 fused_attention: bool, recompute: bool, zero: int, shards: int) -> None:
        self.graph, self.walked, self.recompute = graph, walked, recompute
        self.b0 = int(graph.static.get("batch_size", 1) or 1)
        master, act, low = PRECISIONS[precision]
        self.n_state, n_temp, n_single = OPTIMIZERS[optimizer]
        self.n_temp = n_temp if foreach else n_single
        self.kept = zero_shares(zero, shards)
        self.on_chip = attention_scores(graph, walked) if fused_attention else None
        self.iv = walked.intervals(act_bytes=act, low_bytes=low, on_chip=self.on_chip)
        self.wb = walked.weight_elems * master
        self.param_bytes = float(self.wb.sum())
        self.grads_set_to_none, self.foreach, self.zero, self.shards = grads_set_to_none, foreach, zero, shards
        self.key = ("reserved", id(walked), precision, optimizer, grads_set_to_none, foreach, fused_attention,
                    recompute, zero, shards)

    def at(self, b: int) -> StepTensors:
        """The step's tensors at batch ``b``."""
        graph, walked, iv, n = self.graph, self.walked, self.iv, self.walked.num_nodes
        steps, scale = 2 * n + 2, b / self.b0
        size = np.where(iv.scales, iv.size * scale, iv.size)
        cat, start, end, node = iv.cat, iv.start, np.minimum(iv.end, steps), iv.node
        on_chip = self.on_chip
        if on_chip is not None and on_chip.any():  # the log-sum-exp rows fused attention keeps
            rows = np.array([s for s in np.flatnonzero(on_chip) if walked.ops[s] == "Softmax"], np.int64)
            lse = np.array([walked.elems[s] / max(_last_dim(graph, s), 1) * FP32 for s in rows])
            cat = np.concatenate([cat, np.full(len(rows), _S)])
            size = np.concatenate([size, lse * np.where(walked.dep[rows], scale, 1.0)])
            start = np.concatenate([start, rows])
            end = np.concatenate([end, 2 * n - rows + 1])
            node = np.concatenate([node, rows])
        if self.recompute and n:
            cat, size, start, end = _checkpointed(graph, walked, cat, size, start, end, node)
        # Master parameters, one block per node that owns weights (weight + bias are separate
        # tensors in PyTorch; one block per node keeps the rounding close enough).
        wb, (kw, kg, ko) = self.wb, self.kept
        owner = np.flatnonzero(wb > 0)
        grad_start = (2 * n - owner) if self.grads_set_to_none else np.zeros(len(owner), np.int64)
        # the optimizer's temporaries: a list of parameter-sized tensors per foreach op that
        # returns one (torch.optim's _multi_tensor_* code); single-tensor loops, one parameter's
        temp = np.tile(wb[owner] * ko, self.n_temp) if self.foreach else \
            np.full(self.n_temp, float(wb.max()) * ko if len(wb) else 0.0)
        gathered = 2 * float(wb.max()) if self.zero >= 3 and len(wb) and self.shards > 1 else 0.0  # ZeRO-3's layers
        k, m = len(owner), len(temp)
        cat = np.concatenate([cat, np.full(k, _W), np.full(k, _G), np.full(self.n_state * k, _O), np.full(m, _T),
                              [_K, _W]])
        size = np.concatenate([size, wb[owner] * kw, wb[owner] * kg, np.tile(wb[owner], self.n_state) * ko, temp,
                               [CUBLAS_WORKSPACE, gathered]])
        start = np.concatenate([start, np.zeros(k, np.int64), grad_start, np.zeros(self.n_state * k, np.int64),
                                np.full(m, 2 * n + 1), [0, 0]])
        end = np.concatenate([end, np.full(k * (2 + self.n_state) + m + 2, steps)])
        # a tensor kept all step is first allocated before the step (weights), by its backward
        # (gradients kept by zero_grad()) or by the first optimizer step (its state)
        first = np.concatenate([np.full(len(cat) - 2 * k - self.n_state * k - m - 2, -1), np.full(k, -1),
                                2 * n - owner, np.full(self.n_state * k, 2 * n + 1), np.full(m, -1), [-1, -1]])
        size = np.ceil(size / BLOCK) * BLOCK
        keep = (size > 0) & (end > start)
        return StepTensors(cat[keep], size[keep], start[keep].astype(np.int64), end[keep], first[keep], steps)

    def replayed(self, b: int) -> float:
        """Segments the caching allocator maps for two steps at batch ``b`` (kept on the graph)."""
        def run() -> float:
            t = self.at(b)
            return replay(t.size, t.start, t.end, t.first, t.steps)
        return kept(self.graph, (*self.key, b), run)

    def reserved(self, b: int) -> float:
        """The reserved peak at batch ``b``: the replay's running maximum over the powers of two
        up to ``b``, read between the two around it along a line. A replay alone can fall by a
        few percent from one batch to the next (a request that no longer fits a cached block
        maps a segment one batch and not the next); its envelope never falls as the batch grows,
        and memory is near affine in the batch between two powers of two."""
        top = 1 << max(0, (b - 1).bit_length())
        ladder = [1 << i for i in range(top.bit_length())]
        envelope = np.maximum.accumulate([self.replayed(x) for x in ladder])
        return float(np.interp(b, ladder, envelope))


def _checkpointed(graph, walked: Walk, cat: np.ndarray, size: np.ndarray, start: np.ndarray, end: np.ndarray,
                  node: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The intervals of a checkpointed step: what a block saves for backward lives through the
    block's forward (as a transient) and again from the block's recomputation, at the start of
    its backward, to where it was released before; each block's output stays saved."""
    n = walked.num_nodes
    seg = kept(graph, "checkpoint_segments", lambda: checkpoint_segments(walked))
    seg_end = np.zeros(int(seg.max()) + 1, np.int64)
    np.maximum.at(seg_end, seg, np.arange(n))
    own = node < n
    last = np.where(own, seg_end[seg[np.minimum(node, n - 1)]], n)
    move = (cat == _S) & own & (node != last)
    again = np.flatnonzero(move)
    released = end[again]
    cat, end = cat.copy(), end.copy()
    cat[move], end[move] = _T, np.minimum(end[move], last[move] + 1)
    return (np.concatenate([cat, np.full(len(again), _S)]), np.concatenate([size, size[again]]),
            np.concatenate([start, 2 * n - last[again]]), np.concatenate([end, released]))


def _last_dim(graph, node: int) -> int:
    """The innermost dimension of a node's output (the key length of attention scores)."""
    dims = [int(d) for d in np.asarray(graph.out_shape)[node] if d > 0]
    return dims[-1] if dims else 1


__all__ = ["MiB", "PRECISIONS", "OPTIMIZERS", "CUBLAS_WORKSPACE", "zero_shares", "StepTensors", "StepLayout"]
