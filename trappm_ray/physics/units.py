"""Which unit of the GPU runs each node of a graph: none (views, shape arithmetic), the vector
(CUDA) cores or the tensor (matrix) cores, and which of attention's tensors a fused kernel keeps
on chip. The roofline (:mod:`trappm_ray.physics.roofline`) and the memory model count work and
traffic by these classes.

* Matrix products and convolutions are the tensor class; depthwise and thin grouped convolutions
  are not (cuDNN runs them on the CUDA cores), nor is a product with an odd inner or output
  dimension (:func:`misaligned`).
* Attention (:func:`attention_scores`): FlashAttention (Dao et al., NeurIPS 2022), which PyTorch
  2's ``scaled_dot_product_attention`` runs, never writes the scores to memory. Megatron-LM's
  fused scale-mask-softmax (:data:`SOFTMAX`) sits between: ``q @ k^T`` writes the scores, one
  kernel reads them and writes the half-precision probabilities, the scale and the masks on chip.
"""
from __future__ import annotations

import numpy as np

from trappm_ray.physics.autocast import HALF_OPS
from trappm_ray.physics.graph_walk import POINTWISE, VIEW_OPS, kept, walk

FREE, VECTOR, TENSOR = 0, 1, 2  # node classes: no work, CUDA/vector cores, tensor/matrix cores
# Ops that only re-label or index tensors in a training framework: besides the memory model's
# views, the shape arithmetic ONNX exporters emit (on scalars: nothing worth a kernel).
FREE_OPS = set(VIEW_OPS) | {"Shape", "Size", "Constant", "ConstantOfShape", "Range"}
# Matrix products: at ``fp32`` PyTorch runs them on the FP32 units unless TF32 is allowed.
MATMUL_OPS = {"Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN"}
# Input channels per group under which a grouped Conv counts as depthwise-like: too thin for
# the tensor cores, whose tiles need 8 channels (cuDNN runs depthwise convs on the CUDA cores).
THIN_GROUP_CHANNELS = 8
# What may stand between attention's q @ k^T and its Softmax: scaling, masking, biases.
MASKING = POINTWISE | {"Where"}
# The value of ``fused_attention`` (True: FlashAttention; False: eager, every op a kernel) for
# Megatron-LM's attention, which its SC'21 runs and vTrain's use: ``q @ k^T`` stores the scores,
# one kernel scales, masks and softmaxes them into half-precision probabilities
# (``FusedScaleMaskSoftmax``), and attention dropout (its default rate 0.1) reads those and
# writes them again with a byte of mask each (Shoeybi et al. 2019).
SOFTMAX = "softmax"


def node_classes(graph) -> np.ndarray:
    """Per node FREE / VECTOR / TENSOR (module docstring); ``graph``: a featurized Graph."""
    ops = graph.ops
    cls = np.array([FREE if op in FREE_OPS else TENSOR if op in HALF_OPS else VECTOR for op in ops],
                   np.int8)
    if len(ops):
        groups = np.maximum(np.asarray(graph.attrs)[:, 2], 1)
        per_group = np.asarray(graph.in_shape)[:, 1] / groups  # NCHW: dim 1 is the channels
        cls[(cls == TENSOR) & (groups > 1) & (per_group < THIN_GROUP_CHANNELS)] = VECTOR
    return cls


def attention_scores(graph, tensors=None, cls: np.ndarray | None = None) -> np.ndarray:
    """Per node, True for the score tensors of attention that a fused kernel keeps on chip.

    The pattern: a MatMul of two activations (``q @ k^T``), optionally a few pointwise ops
    (scale, bias, mask: a ``Where`` or ``Add`` whose other inputs are smaller than the scores, as
    Hugging Face's BERT and GPT-2 export their padding and causal masks), a Softmax, consumed
    only by MatMuls of two activations (``p @ v``). FlashAttention (Dao et al., NeurIPS 2022), which PyTorch 2's
    ``scaled_dot_product_attention`` runs, never writes these to memory.

    Found once per graph (kept in ``graph.derived``: the roofline, the memory model and
    :func:`misaligned` each ask).

    Args:
        graph: a :class:`trappm_ray.graph.featurize.Graph`.
        tensors: its ``graph_walk.walk`` (computed when None).
        cls: its :func:`node_classes` (computed when None).
    """
    return kept(graph, "attention_scores", lambda: _attention_scores(graph, tensors, cls))


def _attention_scores(graph, tensors, cls: np.ndarray | None) -> np.ndarray:
    tensors = walk(graph) if tensors is None else tensors
    cls = node_classes(graph) if cls is None else cls
    n, ops, params = len(cls), graph.ops, np.asarray(graph.params)
    plain_mm = (cls == TENSOR) & (params == 0)
    consumers: list[list[int]] = [[] for _ in range(n + 1)]
    for i, ps in enumerate(tensors.preds):
        for p in ps:
            consumers[p].append(i)
    elems = np.asarray(graph.out_elems)
    mask = np.zeros(n, bool)
    for s in (i for i, op in enumerate(ops) if op == "Softmax" and tensors.real[i]):
        chain = [s]  # back from the Softmax through pointwise ops to the q @ k^T MatMul
        while len(chain) < 8 and not plain_mm[chain[-1]]:
            data = [p for p in tensors.preds[chain[-1]] if p < n]
            mm = [p for p in data if plain_mm[p]]
            # the scores are the one input of the Softmax's size; others are broadcast masks,
            # position biases or scalars (a causal mask's Where, an additive padding mask)
            scores = [p for p in data if elems[p] >= elems[s]]
            if not mm and (len(scores) != 1 or ops[scores[0]] not in MASKING):
                break
            chain.append((mm or scores)[0])
        if plain_mm[chain[-1]] and consumers[s] and all(plain_mm[c] for c in consumers[s]):
            mask[chain] = True
    mask.flags.writeable = False
    return mask


def kept_on_chip(graph, fused_attention: bool | str, tensors=None, cls: np.ndarray | None = None) -> np.ndarray:
    """Per node, True where a fused attention kernel keeps the node's output on chip and runs its
    work inside itself: the whole score chain under FlashAttention (``fused_attention=True``:
    ``q @ k^T``, scale, masks and softmax are one kernel with ``p @ v``), the scale and masks under
    Megatron-LM's fused softmax (:data:`SOFTMAX`: the score product and the softmax stay kernels of
    their own), none in eager attention (False). Such a node's output never reaches device memory
    and it issues no kernel of its own.

    Args:
        graph, tensors, cls: as :func:`attention_scores`.
        fused_attention: the attention's kernels (True, :data:`SOFTMAX` or False).
    """
    scores = attention_scores(graph, tensors, cls)
    if not fused_attention:
        return np.zeros(len(scores), bool)
    if fused_attention == SOFTMAX:
        cls = node_classes(graph) if cls is None else cls
        return scores & (cls != TENSOR) & ~np.array([op == "Softmax" for op in graph.ops], bool)
    return scores


def misaligned(graph) -> np.ndarray:
    """Per node, True for a matrix product with an odd inner or output dimension (kept in
    ``graph.derived``): its rows are not 4-byte aligned in half precision (8-byte in fp32), so
    cuBLAS cannot feed the tensor cores with vector loads and runs it at about the CUDA cores'
    rate. GPT-2's vocabulary (50,257) is the common case: on the H200 campaign rows its forward
    pass takes 2.1 us a token in bf16 and in TF32 alike (BERT-base, vocabulary 30,522: 0.73 and
    1.28 us), and with its head at the vector peak the step model reads GPT-2's training step
    within 10% at 128-1,024 tokens (50-75% short before). Attention's own products are left out:
    a fused kernel pads its tiles."""
    return kept(graph, "misaligned", lambda: _misaligned(graph))


def _misaligned(graph) -> np.ndarray:
    n = graph.num_nodes
    found = np.zeros(n, bool)
    products = [i for i, op in enumerate(graph.ops) if op in ("Gemm", "MatMul")]
    if products:
        def last(shape: np.ndarray) -> int:
            dims = shape[shape > 0]
            return int(dims[-1]) if len(dims) else 0
        scores = attention_scores(graph)
        preds = walk(graph).preds
        for i in products:
            odd = last(np.asarray(graph.in_shape[i])) % 2 == 1 or last(np.asarray(graph.out_shape[i])) % 2 == 1
            found[i] = odd and not scores[i] and not any(p < n and scores[p] for p in preds[i])
    found.flags.writeable = False
    return found


def attends(graph) -> bool:
    """Whether ``graph`` has attention scores a fused kernel keeps on chip (kept in
    ``graph.derived``): without any, fused attention changes nothing of its roofline."""
    return kept(graph, "attends", lambda: bool(attention_scores(graph).any()))


__all__ = ["FREE", "VECTOR", "TENSOR", "FREE_OPS", "MATMUL_OPS", "SOFTMAX", "node_classes", "attention_scores",
           "kept_on_chip", "misaligned", "attends"]
