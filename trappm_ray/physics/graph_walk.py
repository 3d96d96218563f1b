"""The structural pass of the memory model: which tensors of a graph exist in PyTorch eager
training, who keeps them for backward, and the byte intervals they occupy on the step timeline.

:func:`walk` resolves, once per graph, what is independent of precision: views to the tensor
they alias, pointwise chains to the fused op PyTorch runs, each node's data inputs and what its
autograd node saves. :meth:`Walk.intervals` then lays the tensors on the timeline for one
activation precision (autocast's dtype rules). Both are linear in nodes + edges.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, TypeVar

import numpy as np

from trappm_ray.physics.autocast import FP32, HALF_OPS, Dtypes, dtypes

T = TypeVar("T")

DEFAULT_ACT_BYTES = FP32
# What autograd saves (PyTorch derivatives.yaml): the inputs ...
SAVE_IN = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "BatchNormalization",
           "LayerNormalization", "GroupNormalization", "InstanceNormalization",
           "LpNormalization", "AveragePool", "GlobalAveragePool", "MaxPool", "GlobalMaxPool",
           "LpPool", "LeakyRelu", "HardSwish", "HardSigmoid", "Clip", "Gelu", "Erf", "Pow",
           "Softplus", "Mish", "Abs", "PRelu", "Log", "ReduceMax", "ReduceMin", "ReduceL2",
           "Selu", "Elu", "Sin", "Cos", "LSTM", "GRU", "RNN"}
# ... the output ...
SAVE_OUT = {"Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp", "Sqrt", "Reciprocal"}
# ... both operands only when the other one needs a gradient (not a scalar constant) ...
SAVE_IF_TENSOR = {"Mul", "Div"}
# ... the output instead of the input when run in place after a BatchNorm, as timm's
# BatchNormAct layers do (``leaky_relu_``/``hardtanh_``/``elu_`` derivatives use the result) ...
INPLACE_RESULT = {"LeakyRelu", "Clip", "Elu", "Selu"}
# ... plus int64 argmax indices of the output's size.
INDEX_OPS = {"MaxPool", "GlobalMaxPool"}
# cuDNN's RNN training keeps a reserve space of every gate and state of every step: per output
# element, the gates plus the cell and hidden state (an assumption sized from cuDNN's layout).
RNN_RESERVE = {"LSTM": 6, "GRU": 5, "RNN": 2}
# Outputs that alias their input in PyTorch (views, no-ops in training graphs).
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Expand",
            "Slice", "Split", "Gather", "Cast", "CastLike", "Dropout"}
# Pointwise ops: a chain of them with one data input is one fused activation in PyTorch
# (GELU, SiLU, Mish, GELU-tanh are exported as such chains).
POINTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "Sigmoid", "Relu", "Exp",
             "Log", "Neg", "Abs", "Reciprocal", "Softplus", "HardSigmoid", "HardSwish", "Clip",
             "Min", "Max", "LeakyRelu", "Elu", "Gelu", "Mish", "Sin", "Cos", "Floor", "Ceil",
             "Round", "Sign"}
NORM_OPS = {"BatchNormalization", "LayerNormalization", "InstanceNormalization",
            "GroupNormalization"}
# Tensors this small are scalars of shape arithmetic (or tiny constants): never worth a block
# and never a reason for a Mul/Div to keep its other operand.
SCALAR_ELEMS = 64
WORKSPACE_CAP = 2**30  # cuDNN picks algorithms whose workspace fits; cap the assumption at 1 GiB
CAT_W, CAT_G, CAT_O, CAT_S, CAT_T, CAT_K = range(6)


@dataclass
class Intervals:
    """Byte intervals ``[start, end)`` on the step timeline (at the graph's batch size)."""

    cat: np.ndarray
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    scales: np.ndarray  # True where the size is proportional to the batch
    node: np.ndarray    # the node an interval belongs to (n: the data input)


@dataclass
class Walk:
    """Precision-independent structure of a graph for the memory model (see :func:`walk`).

    Index ``num_nodes`` stands for the graph's data input (the batch of images/tokens).
    """

    num_nodes: int
    ops: list
    elems: np.ndarray          # output elements per tensor (index n: the data input)
    real: np.ndarray           # a tensor PyTorch allocates (bool)
    preds: list                # per node: data-input tensor ids after resolving views/fusion
    fused: np.ndarray          # node is the last op of a fused pointwise chain
    req: np.ndarray            # output needs a gradient
    folded: np.ndarray         # Conv with a BatchNorm folded in
    weight_elems: np.ndarray   # trainable parameters per node
    save_cond: np.ndarray      # Mul/Div with a trainable operand
    dep: np.ndarray            # tensor depends on the data input (scales with the batch)
    laid: dict = field(default_factory=dict, repr=False, compare=False)  # intervals, dtypes per precision

    def dtypes(self, act_bytes: int = FP32, low_bytes: int | None = None) -> Dtypes:
        """Every tensor's dtype under autocast (:func:`trappm_ray.physics.autocast.dtypes`), kept per precision."""
        key = ("dtypes", act_bytes, low_bytes)
        if key not in self.laid:
            self.laid[key] = dtypes(self.ops, self.preds, self.fused, self.elems, self.real, act_bytes, low_bytes)
        return self.laid[key]

    def intervals(self, act_bytes: int = FP32, low_bytes: int | None = None,
                  on_chip: np.ndarray | None = None) -> Intervals:
        """Lay every tensor on the timeline for one precision (once per precision and on-chip
        mask: a batch search asks for the same layout at every batch; arrays read-only).

        Args:
            act_bytes: bytes per element of activations outside autocast (and of the input).
            low_bytes: autocast's lower precision (2) or None without autocast.
            on_chip: per node, True where the output never reaches device memory (the scores
                of fused attention): no tensor, no copy, no gradient.
        """
        key = (act_bytes, low_bytes, None if on_chip is None else np.asarray(on_chip, bool).tobytes())
        if key not in self.laid:
            iv = self._intervals(act_bytes, low_bytes, on_chip)
            for a in (iv.cat, iv.size, iv.start, iv.end, iv.scales, iv.node):
                a.flags.writeable = False
            self.laid[key] = iv
        return self.laid[key]

    def _intervals(self, act_bytes: int, low_bytes: int | None, on_chip: np.ndarray | None) -> Intervals:
        n, ops, preds = self.num_nodes, self.ops, self.preds
        real_mask = self.real.copy()
        if on_chip is not None:
            real_mask[:n] &= ~np.asarray(on_chip, bool)
        # the loop reads Python lists: a NumPy scalar per element costs more than the loop's logic
        real, elems, dep, req = real_mask.tolist(), self.elems.tolist(), self.dep.tolist(), self.req.tolist()
        fused, folded, save_cond = self.fused.tolist(), self.folded.tolist(), self.save_cond.tolist()
        bwd = 2 * n  # backward of node i runs at step bwd - i
        typed = self.dtypes(act_bytes, low_bytes)
        dt, targets = typed.bytes.tolist(), typed.target
        last = list(range(n + 1))
        last[n] = 2 * n + 2
        saver = [n + 1] * (n + 1)  # smallest index of a node that saves the tensor
        cons_max = [-1] * (n + 1)
        out: list[tuple] = []  # (cat, bytes, start, end, scales, node)
        for i in range(n):
            if not real[i] and not fused[i] and not preds[i]:
                continue
            op, ps = ops[i], preds[i]
            target = targets[i]
            in_place = op in INPLACE_RESULT and len(ps) == 1 and ps[0] < n and folded[ps[0]]
            saves_in = not in_place and (fused[i] or op in SAVE_IN or (
                op in SAVE_IF_TENSOR and (len(ps) > 1 or save_cond[i])))
            keep_to = bwd - i + 1 if saves_in else i + 1
            for p in ps:
                cons_max[p] = max(cons_max[p], i)
                last[p] = max(last[p], i + 1)
                if not real[p]:  # kept on chip: nothing to copy or save
                    continue
                if target is not None and dt[p] != target:
                    # autocast makes a copy in the op's dtype; that copy is what is kept
                    out.append((CAT_S if saves_in else CAT_T, elems[p] * target, i, keep_to,
                                dep[p], i))
                elif saves_in:
                    saver[p] = min(saver[p], i)
            if not real[i]:
                continue
            if (op in SAVE_OUT and not fused[i]) or in_place:
                saver[i] = i
            if folded[i]:  # the BatchNorm's input (the conv output) and its grad
                out.append((CAT_S, elems[i] * dt[i], i, bwd - i + 1, dep[i], i))
                out.append((CAT_T, elems[i] * dt[i], bwd - i, bwd - i + 1, dep[i], i))
            if op in RNN_RESERVE:
                out.append((CAT_S, elems[i] * RNN_RESERVE[op] * dt[i], i, bwd - i + 1, dep[i], i))
            if op in INDEX_OPS:
                out.append((CAT_S, elems[i] * 8, i, bwd - i + 1, dep[i], i))
            if op in ("Conv", "ConvTranspose"):
                ws = min(elems[i] * dt[i], WORKSPACE_CAP)
                out.append((CAT_K, ws, i, i + 1, dep[i], i))
                out.append((CAT_K, ws, bwd - i, bwd - i + 1, dep[i], i))
        for i in range(n + 1):
            if not real[i]:
                continue
            size = elems[i] * dt[i]
            sink = i < n and cons_max[i] < 0 and dep[i]
            if i == n:
                out.append((CAT_S, size, 0, 2 * n + 2, True, i))
                continue
            if sink:  # model output: kept until its backward; the loss works on it at step n
                out.append((CAT_S, size, i, bwd - i + 1, dep[i], i))
                out.append((CAT_T, elems[i] * FP32 * 2, n, n + 1, dep[i], i))  # log-softmax + grad
            elif saver[i] <= n:
                out.append((CAT_S, size, i, max(bwd - saver[i] + 1, last[i]), dep[i], i))
            else:
                out.append((CAT_T, size, i, last[i], dep[i], i))
            if req[i]:  # gradient w.r.t. this tensor, from its last consumer's backward
                g0 = n if sink else bwd - cons_max[i]
                out.append((CAT_T, size, g0, bwd - i + 1, dep[i], i))
        if low_bytes is not None:  # autocast's cache of half weight copies, until it exits
            for i in np.flatnonzero(self.weight_elems > 0):
                if ops[i] in HALF_OPS:
                    out.append((CAT_W, self.weight_elems[i] * low_bytes, i, 2 * n + 1, False, i))
        if not out:
            z = np.zeros(0)
            return Intervals(z.astype(np.int64), z, z.astype(np.int64), z.astype(np.int64),
                             z.astype(bool), z.astype(np.int64))
        cat, size, start, end, scales, node = zip(*out)
        return Intervals(np.array(cat, np.int64), np.array(size, np.float64),
                         np.array(start, np.int64), np.array(end, np.int64),
                         np.array(scales, bool), np.array(node, np.int64))


def checkpoint_segments(w: Walk) -> np.ndarray:
    """Per node, the activation-checkpointing segment it belongs to (0, 1, ...).

    A segment ends where one activation alone crosses to the rest of the graph (the residual
    stream between two blocks) once it holds a join of two activations (a residual Add, a
    concatenation): each residual block is a segment, as ``torch.utils.checkpoint`` per block
    runs it (timm's ``set_grad_checkpointing``, transformers' ``gradient_checkpointing_enable``).
    A chain with no join stays one segment.

    Only activations computed from the parameters count as crossing: a tensor no weight went
    into (a causal or padding mask, a rotary position table) is an input that every block
    takes, as ``checkpoint(block, hidden, mask, ...)`` passes it, not the stream between blocks.
    Counted, they merged the blocks: Hugging Face's GPT-2 (its mask read by all 12 blocks) was 3
    segments, one of 2,880 of its 2,923 nodes, and its LLaMA-style decoder (mask, cos and sin
    tables) 5, so the memory model read a checkpointed step as storing nearly everything (the
    H200 campaign's 1.1 B decoder at 512 tokens, b16: +64% against ``max_memory_allocated``).
    A graph without weights counts every activation.
    """
    n = w.num_nodes
    crossing = np.zeros(n + 1, np.int64)  # activations produced at or before i, used after i
    last = np.full(n + 1, -1)
    learned = np.zeros(n + 1, bool)  # computed from the parameters (node n: the data input)
    for i, ps in enumerate(w.preds):
        learned[i] = w.weight_elems[i] > 0 or any(learned[p] for p in ps)
        for p in ps:
            last[p] = max(last[p], i)
    if not learned.any():
        learned[:] = True
    for t in range(n + 1):
        if w.real[t] and w.dep[t] and learned[t] and last[t] > t:
            first = 0 if t == n else t
            crossing[first] += 1
            crossing[last[t]] -= 1
    alive = np.cumsum(crossing)[:n]
    seg, current, joined = np.zeros(n, np.int64), 0, False
    for i in range(n):
        seg[i] = current
        joined |= sum(1 for p in w.preds[i] if w.dep[p]) > 1
        if joined and alive[i] == 1 and w.real[i]:
            current, joined = current + 1, False
    return seg


def _pred_lists(graph) -> list:
    n = graph.num_nodes
    preds: list[list[int]] = [[] for _ in range(n)]
    src, dst = graph.edge_index
    for s, d in zip(src.tolist(), dst.tolist()):
        preds[d].append(s)
    return preds


def kept(graph, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()`` once per graph and ``key``, kept in ``graph.derived`` (never stored with the
    graph): one prediction asks the physics the same questions of one graph many times (every
    batch, setting and device it tries). An object without ``derived`` computes every time."""
    memo = getattr(graph, "derived", None)
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def walk(graph, folded_norm: np.ndarray | None = None, arithmetic: bool = False) -> Walk:
    """Resolve views, fused pointwise chains and data inputs of ``graph`` (one linear pass).

    Args:
        graph: a featurized :class:`~trappm_ray.graph.featurize.Graph`.
        folded_norm: per node, True where a Conv carries a folded BatchNorm (None: none). A
            walk is computed once per graph and mask, and kept in ``graph.derived``.
        arithmetic: a chain through a ``Pow`` is arithmetic written in Python (``torch.pow``:
            Hugging Face's tanh GELU of GPT-2, GPT-J and CodeGen, timm's StarReLU), which eager
            PyTorch runs op by op, each op's autograd node saving what it saves; no library
            activation exports a ``Pow`` (``F.gelu``'s tanh form cubes by multiplying). True for
            the memory model (what eager allocates); False reads it as one fused op, as a floor may.
    """
    if folded_norm is None:
        return kept(graph, ("walk", None, arithmetic), lambda: _walk(graph, None, arithmetic))
    mask = np.asarray(folded_norm, bool)  # it changes nothing but the layout: the walk without it, re-masked
    return kept(graph, ("walk", mask.tobytes(), arithmetic),
                lambda: replace(walk(graph, None, arithmetic), folded=mask[:graph.num_nodes], laid={}))


def _walk(graph, folded_norm: np.ndarray | None, arithmetic: bool = False) -> Walk:
    n, ops = graph.num_nodes, graph.ops
    fusing = POINTWISE - {"Pow"} if arithmetic else POINTWISE
    raw = _pred_lists(graph)
    outdeg = np.bincount(graph.edge_index[0], minlength=n) if graph.num_edges else np.zeros(n, int)
    out_elems = np.asarray(graph.out_elems, np.float64)
    bpe = np.divide(graph.out_bytes, out_elems, out=np.zeros(n), where=out_elems > 0)
    is_float = (bpe >= 2) & (bpe <= 4)
    params = np.asarray(graph.params, np.float64)
    # Scalars (0.5 of an exported GELU) are constants, not parameters; anything larger is a
    # parameter, biases of a few channels included (they are small initializers in exports).
    weight_elems = np.where(params > 1, params, 0.0)
    in_elems = np.asarray(graph.in_elems, np.float64)
    elems = np.append(out_elems, in_elems[[i for i in range(n) if not raw[i]]].max(initial=0.0))
    dep = [False] * n
    req = [False] * n
    base = [-1] * (n + 1)  # tensor a node's output aliases (itself when it allocates)
    base[n] = n
    root = [-1] * n        # data input of the pointwise chain a node belongs to
    absorbed = [False] * n
    closures, split_in = [0] * n, [False] * n
    n_out = np.asarray(graph.n_out).tolist()
    fused = [False] * n
    preds: list[list[int]] = [[] for _ in range(n)]
    # the loop reads Python lists: a NumPy scalar per element costs more than the loop's logic
    fed, learned = (in_elems > 0).tolist(), (weight_elems > 0).tolist()
    small, degree = (~is_float | (out_elems <= SCALAR_ELEMS)).tolist(), outdeg.tolist()
    for i in range(n):
        ps = raw[i]
        dep[i] = True in [dep[p] for p in ps] or (not ps and fed[i])
        req[i] = True in [req[p] for p in ps] or learned[i]
        # Tensors computed from parameters alone (relative-position tables gathered each step)
        # exist too; they just do not grow with the batch.
        if not (dep[i] or req[i]) or small[i]:
            continue
        # data inputs, views resolved to their base; the graph input when nothing else feeds it
        res: list[int] = []
        for p in ps:
            if base[p] >= 0 and base[p] not in res:
                res.append(base[p])
        res = res or ([n] if fed[i] and dep[i] else [])
        op = ops[i]
        if op in VIEW_OPS and (res or op != "Gather"):  # a Gather from a parameter copies
            base[i] = res[0] if res else -1
            continue
        base[i] = i
        preds[i] = res
        if op in fusing:
            roots, parts, direct = set(), [], []
            for p in ps:
                if base[p] < 0:
                    continue
                if root[p] >= 0 and degree[p] == 1 and ops[p] in fusing:
                    roots.add(root[p])
                    parts.append(p)
                else:  # through a view, the view itself: two slices of one tensor differ
                    roots.add(p if ops[p] in VIEW_OPS else base[p])
                    direct.append(p)
            # x * f(x) closes a fused activation (SiLU, GELU, Mish). Through a multi-output
            # node (Split/chunk) the two operands may be different halves, so a second closure
            # there is a gated unit (GLU: x1 * silu(x2)), two ops in PyTorch, not one.
            closes = sum(closures[p] for p in parts) + bool(parts and direct)
            multi = any(split_in[p] for p in parts) or any(n_out[p] > 1 for p in direct)
            if len(roots) == 1 and not (multi and closes > 1):
                root[i] = roots.pop()
                closures[i], split_in[i] = closes, multi
                for p in parts:
                    absorbed[p] = True
                    fused[i] = True
            elif not roots and res:
                root[i] = res[0]
    real = np.zeros(n + 1, bool)
    for i in range(n):
        if base[i] == i and not absorbed[i]:
            real[i] = True
            if fused[i]:
                preds[i] = [base[root[i]]]
        elif absorbed[i]:
            preds[i] = []
    real[n] = elems[n] > 0
    for i in range(n):  # drop inputs that are absorbed chain members (their tensors never exist)
        if preds[i] and not fused[i]:
            preds[i] = [p for p in preds[i] if p == n or real[p]]
    folded = np.zeros(n, bool) if folded_norm is None else np.asarray(folded_norm, bool)[:n]
    # Mul/Div by a learned tensor (layer scale), or of two outputs of one Split (x1 * x2): the
    # operands are needed for backward; by a constant they are not.
    save_cond = (params > SCALAR_ELEMS) | np.array(
        [any(n_out[p] > 1 for p in raw[i]) for i in range(n)], bool)
    return Walk(n, list(ops), elems, real, preds, np.array(fused, bool), np.array(req + [False]), folded,
                weight_elems, save_cond, np.array(dep + [True]))
