"""Which tensors of a graph are weights, wherever the exporter put them.

Initializers and weight-typed graph inputs are the usual places, but not the only ones: the
classic ONNX model-zoo files (AlexNet, VGG-19, ResNet-50 ... as shipped in the ``onnx``
package) create every weight with ``ConstantOfShape`` from a shape constant, some exporters
emit weights as ``Constant`` nodes, and others transpose, cast or dequantize a stored weight
before use. Counting only initializers gave VGG-19 128 parameters instead of 143.7M.

A tensor is *constant* when it does not depend on the data: an initializer, a weight input, a
``Constant`` output, or the output of a deterministic node whose inputs are all constant. A
constant that feeds a weight slot (a Conv's W and B, a MatMul/Gemm operand, a normalization's
scale, an embedding table, an RNN's matrices...) is a weight. Nodes that only compute weights
(the ``ConstantOfShape``, the ``Transpose`` of a stored matrix) are folded: they cost nothing
per step, and the weights they consumed are counted once, at the weight they produce.
"""
from __future__ import annotations

import math

import onnx

# Input positions that hold parameters when they are constant, by op (default domain).
WEIGHT_SLOTS = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "ConvInteger": (1,), "QLinearConv": (3, 8),
    "Gemm": (0, 1, 2), "MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3),
    "Einsum": tuple(range(8)),
    "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2),
    "LayerNormalization": (1, 2), "GroupNormalization": (1, 2), "RMSNormalization": (1,),
    "LpNormalization": (), "PRelu": (1,),
    "Gather": (0,),  # an embedding table
    "LSTM": (1, 2, 3, 7), "GRU": (1, 2, 3), "RNN": (1, 2, 3),
}
# Elementwise ops whose constant operands are weights when they have more than one element:
# a Caffe2 "Scale" layer (BatchNorm's affine part as Mul + Add) or a positional embedding,
# not the scalar 0.5 or sqrt(d) of an attention block.
ELEMENTWISE_SLOTS = {"Add": (0, 1), "Mul": (0, 1), "Sub": (0, 1), "Div": (0, 1)}
# Ops whose outputs are not a function of their inputs (or that the featurizer refuses).
NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                "Multinomial", "Bernoulli", "If", "Loop", "Scan", "SequenceMap"}
# Integer/bool tensors are indices and shape arithmetic, not parameters.
INDEX_DTYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL}
CONSTANT_NODE_WEIGHT = 64  # a Constant node above this many elements is a weight anywhere


def constant_tensors(nodes, weights: set[str]) -> set[str]:
    """Names of the tensors that do not depend on any data input (``nodes`` in topo order)."""
    const = set(weights)
    for n in nodes:
        if n.op_type in NOT_FOLDABLE or n.domain not in ("", "ai.onnx"):
            continue
        ins = [x for x in n.input if x]
        if n.op_type == "Constant" or (ins and all(x in const for x in ins)):
            const.update(o for o in n.output if o)
    return const


def find_weights(nodes, shapes: dict, dtypes: dict, weights: set[str]
                 ) -> tuple[set[str], set[int]]:
    """All weight tensors, and the indices of the nodes that only compute weights.

    Args:
        nodes: the graph's nodes in topological order.
        shapes, dtypes: every tensor's shape and element type.
        weights: initializers and weight-typed graph inputs (always weights).
    """
    const = constant_tensors(nodes, weights)
    found = set(weights)
    for n in nodes:
        if (n.op_type == "Constant" and n.output
                and math.prod(shapes.get(n.output[0], (0,))) > CONSTANT_NODE_WEIGHT):
            found.add(n.output[0])
        if n.domain not in ("", "ai.onnx"):
            continue
        slots = WEIGHT_SLOTS.get(n.op_type) or ELEMENTWISE_SLOTS.get(n.op_type, ())
        min_elements = 2 if n.op_type in ELEMENTWISE_SLOTS else 0
        for i in slots:
            x = n.input[i] if i < len(n.input) else ""
            if (x and x in const and dtypes.get(x, onnx.TensorProto.FLOAT) not in INDEX_DTYPES
                    and math.prod(shapes.get(x, (0,))) >= min_elements):
                found.add(x)
    # Walk back from the weights through the nodes that compute them (ConstantOfShape ->
    # Unsqueeze -> Mul, a stored matrix -> Reshape -> Gemm): those are folded, and their float
    # inputs are weight sources whose producers may be folded in turn.
    folded = set()
    # an output nothing reads does not stop a fold: a training-mode BatchNormalization that
    # standardises a weight (NF-Nets, BiT) also returns running statistics no node uses
    read = {x for n in nodes for x in n.input if x}
    for i in range(len(nodes) - 1, -1, -1):
        n = nodes[i]
        outs = [o for o in n.output if o and (o in read or o == n.output[0])]
        if (not outs or n.op_type == "Constant" or any(o not in found for o in outs)
                or not all(x in const for x in n.input if x)):
            continue
        folded.add(i)
        found.update(x for x in n.input
                     if x and dtypes.get(x, onnx.TensorProto.FLOAT) not in INDEX_DTYPES)
    return found, folded
