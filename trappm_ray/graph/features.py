"""Named, versioned feature sets that turn a :class:`~trappm_ray.graph.featurize.Graph` into tensors.

``trappm-v1`` reproduces the published TraPPM encoding (113 values per node: a 98-way operator
one-hot, first input and first output shape padded to 6, MACs, parameters, memory; 6 static
values), unscaled as published. ``v2`` fixes its known weaknesses: a vocabulary covering what
torch's exporters emit plus an ``other`` slot, every input/output summarised, log-scaled numeric
features, node attributes, and richer static features. Edge direction is left to the model: both
sets store forward edges and :func:`edge_index` adds the reverse ones for ``v2``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from trappm_ray.graph.featurize import Graph

# 97 operators + the unknown slot "None", as in the published encoding's layout (98 one-hot).
OPS_V1 = (
    "Abs", "Acos", "Add", "And", "ArgMax", "ArgMin", "Asin", "Atan", "AveragePool",
    "BatchNormalization", "Cast", "Ceil", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv",
    "ConvTranspose", "Cos", "CumSum", "DepthToSpace", "Div", "Dropout", "Einsum", "Elu", "Equal",
    "Erf", "Exp", "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gemm",
    "GlobalAveragePool", "GlobalMaxPool", "Greater", "GRU", "HardSigmoid", "Identity",
    "InstanceNormalization", "LeakyRelu", "Less", "Log", "LogSoftmax", "LRN", "LSTM", "MatMul",
    "Max", "MaxPool", "Mean", "Min", "Mod", "Mul", "Neg", "NonZero", "Not", "Or", "Pad", "Pow",
    "PRelu", "Range", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "Relu", "Reshape", "Resize", "RNN", "ScatterND", "Selu", "Shape",
    "Sigmoid", "Sign", "Sin", "Slice", "Softmax", "Softplus", "SpaceToDepth", "Split", "Sqrt",
    "Squeeze", "Sub", "Sum", "Tanh", "Tile", "TopK", "Transpose", "Unsqueeze", "Upsample",
    "Where", "Xor", "None",
)
assert len(OPS_V1) == 98 and len(set(OPS_V1)) == 98

# v1 plus what current torch exporters (legacy and dynamo) emit for modern architectures.
OPS_V2 = tuple(o for o in OPS_V1 if o != "None") + (
    "Gelu", "LayerNormalization", "GroupNormalization", "RMSNormalization", "HardSwish", "Mish",
    "Swish", "Celu", "ThresholdedRelu", "Shrink", "Softsign", "IsNaN", "IsInf", "Trilu",
    "ReduceLogSumExp", "ReduceSumSquare", "ReduceL1", "LpNormalization", "MeanVarianceNormalization",
    "LpPool", "MaxUnpool", "MaxRoiPool", "RoiAlign", "GridSample", "Col2Im", "Size", "Tan",
    "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Round", "BitShift", "Compress", "OneHot",
    "ScatterElements", "GatherND", "NonMaxSuppression", "Attention", "RotaryEmbedding",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
    "MatMulInteger", "ConvInteger", "CastLike", "SequenceConstruct", "SplitToSequence",
    "ConcatFromSequence", "EyeLike", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
    "GreaterOrEqual", "LessOrEqual", "BitwiseAnd", "BitwiseOr", "Det", "Hardmax", "Optional",
    "ReverseSequence", "STFT", "DFT", "CenterCropPad", "AffineGrid", "ImageDecoder", "Unique",
    "Multinomial", "Dropout", "Einsum", "other",
)
OPS_V2 = tuple(dict.fromkeys(OPS_V2))  # keep first occurrence, drop duplicates listed twice

LOG_SCALE = 1 / 16  # log1p(1e12) * 1/16 ~ 1.7: numeric features land in [0, ~2]
_SHAPE_COLS = 8  # rank, log numel, six dims (see _shape_summary)


@dataclass(frozen=True)
class FeatureSet:
    """A versioned encoding: operator vocabulary, node and static feature sizes."""

    name: str
    ops: tuple[str, ...]
    unknown: str
    node_dim: int
    static_dim: int
    bidirectional: bool

    def op_index(self, op: str) -> int:
        return self._index.get(op, self._index[self.unknown])

    @property
    def _index(self) -> dict[str, int]:
        cache = _INDEX.get(self.name)
        if cache is None:
            cache = _INDEX[self.name] = {o: i for i, o in enumerate(self.ops)}
        return cache


_INDEX: dict[str, dict[str, int]] = {}
V1 = FeatureSet("trappm-v1", OPS_V1, "None", 98 + 6 + 6 + 3, 6, False)
V2_STATIC = ("batch_size", "resolution", "nodes", "edges", "macs", "params", "weight_bytes",
             "activation_bytes", "train_memory_estimate_bytes")
V2 = FeatureSet("v2", OPS_V2, "other", len(OPS_V2) + 2 * _SHAPE_COLS + 4 + 4 + 3,
                len(V2_STATIC), True)
FEATURE_SETS = {"trappm-v1": V1, "v1": V1, "v2": V2}


def get(name: str) -> FeatureSet:
    try:
        return FEATURE_SETS[name]
    except KeyError:
        raise ValueError(f"unknown feature set '{name}' (choose from v1, trappm-v1, v2)") from None


def unknown_ops(graph: Graph, fs: FeatureSet | str = V2) -> dict[str, int]:
    """Operators outside the vocabulary (they share the unknown slot), with their counts."""
    # accept a name like the other entry points (``unknown_ops(g, "v1")`` raised AttributeError)
    fs = get(fs) if isinstance(fs, str) else fs
    index = fs._index
    return dict(sorted(Counter(o for o in graph.ops if o not in index).items()))


def _one_hot(graph: Graph, fs: FeatureSet) -> np.ndarray:
    idx = np.fromiter((fs.op_index(o) for o in graph.ops), np.int64, graph.num_nodes)
    out = np.zeros((graph.num_nodes, len(fs.ops)), np.float32)
    out[np.arange(graph.num_nodes), idx] = 1.0
    return out


def _shape_summary(shape: np.ndarray) -> np.ndarray:
    """Rank, log element count and six log-scaled dims of a ``[N, 6]`` shape block."""
    rank = (shape > 0).sum(1, keepdims=True)
    numel = np.where(rank > 0, np.prod(np.maximum(shape, 1), 1, keepdims=True), 0)
    return np.concatenate([rank / 6, np.log1p(numel) * LOG_SCALE,
                           np.log1p(shape) * LOG_SCALE * 2], 1)


def node_features(graph: Graph, fs: FeatureSet | str = V2) -> np.ndarray:
    """``[N, fs.node_dim]`` float32 node feature matrix."""
    fs = get(fs) if isinstance(fs, str) else fs
    if fs is V1:
        memory = graph.weight_bytes + graph.out_bytes
        x = np.concatenate([_one_hot(graph, fs), graph.in_shape, graph.out_shape,
                            np.stack([graph.macs, graph.params, memory], 1)], 1)
        return x.astype(np.float32)
    lg = lambda v: np.log1p(np.asarray(v, np.float64))[:, None] * LOG_SCALE  # noqa: E731
    x = np.concatenate([
        _one_hot(graph, fs), _shape_summary(graph.in_shape), _shape_summary(graph.out_shape),
        graph.n_in[:, None] / 4, graph.n_out[:, None] / 4, lg(graph.in_elems), lg(graph.out_elems),
        lg(graph.macs), lg(graph.params), lg(graph.out_bytes), lg(graph.weight_bytes),
        np.log1p(graph.attrs) * LOG_SCALE * 4,
    ], 1)
    assert x.shape[1] == fs.node_dim, (x.shape, fs.node_dim)
    return x.astype(np.float32)


def static_features(graph: Graph, fs: FeatureSet | str = V2) -> np.ndarray:
    """Graph-level features: raw published six for v1, log-scaled for v2."""
    fs = get(fs) if isinstance(fs, str) else fs
    s = graph.static
    if fs is V1:
        memory = s["weight_bytes"] + s["activation_bytes"]
        return np.array([s["batch_size"], s["nodes"], s["edges"], s["macs"], s["params"], memory],
                        np.float32)
    return (np.log1p(np.array([s[k] for k in V2_STATIC], np.float64)) * LOG_SCALE
            ).astype(np.float32)


def edge_index(graph: Graph, fs: FeatureSet | str = V2) -> np.ndarray:
    """Edges for message passing: forward only (v1, as published) or both directions (v2)."""
    fs = get(fs) if isinstance(fs, str) else fs
    if not fs.bidirectional:
        return graph.edge_index.astype(np.int64)
    return np.concatenate([graph.edge_index, graph.edge_index[::-1]], 1).astype(np.int64)
