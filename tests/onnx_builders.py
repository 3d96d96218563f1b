"""Tiny hand-built ONNX models with known answers (``onnx.helper`` only: no torch, no files read).

Every builder returns an ``onnx.ModelProto``; ``to_bytes`` serializes one. The ``*_EXPECT``
helpers next to a builder give the quantities the featurizer must report for it, worked out by
hand from the cost rules in ``trappm_ray.graph.featurize._macs``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
OPSET = 17


def _model(nodes, inputs, outputs, initializers=(), value_info=(), opset=OPSET, extra_opsets=(),
           name="g") -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs),
                              initializer=list(initializers), value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onnx_builders")
    model.ir_version = 8
    return model


def to_bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


def _init(name, shape, dtype=np.float32, value=None):
    arr = np.full(shape, 0.5 if value is None else value, dtype=dtype)
    return numpy_helper.from_array(arr, name)


def _const_i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


# --------------------------------------------------------------------------------------------
# The tiny CNN classifier:  x[N,3,H,W] -Conv(4,3x3,pad 1,+bias)-> Relu -> GlobalAveragePool
#                           -> Flatten -> Gemm(5, transB, +bias) -> y[N,5]
# --------------------------------------------------------------------------------------------
CNN_C_IN, CNN_C_OUT, CNN_K, CNN_HW, CNN_CLASSES = 3, 4, 3, 8, 5
CNN_WEIGHTS = {  # name -> shape
    "conv.W": (CNN_C_OUT, CNN_C_IN, CNN_K, CNN_K),
    "conv.B": (CNN_C_OUT,),
    "fc.W": (CNN_CLASSES, CNN_C_OUT),
    "fc.B": (CNN_CLASSES,),
}
CNN_OPS = ["Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm"]


def cnn_model(weights: str = "initializer", batch: str | int = "N", hw: str | int = CNN_HW,
              conv_bias: bool = True, shuffle_seed: int | None = None) -> onnx.ModelProto:
    """The tiny CNN.

    Args:
        weights: ``"initializer"`` (the usual export) or ``"inputs"`` (``export_params=False``:
            weights are typed graph inputs after the data input, no initializers).
        batch: the data input's first dim, symbolic name or fixed value.
        hw: spatial dims of the data input: an int, or a symbolic name (needs ``resolution=``).
        conv_bias: give the Conv a bias input.
        shuffle_seed: write the nodes in a shuffled (non-topological) order.
    """
    spatial = [hw, hw] if isinstance(hw, int) else [f"{hw}", f"{hw}_w"]
    x = helper.make_tensor_value_info("x", F, [batch, CNN_C_IN, *spatial])
    y = helper.make_tensor_value_info("y", F, [batch, CNN_CLASSES])
    conv_in = ["x", "conv.W"] + (["conv.B"] if conv_bias else [])
    nodes = [
        helper.make_node("Conv", conv_in, ["c"], name="conv", kernel_shape=[CNN_K, CNN_K],
                         pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.W", "fc.B"], ["y"], name="fc", transB=1),
    ]
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(nodes))
        nodes = [nodes[i] for i in order]
    wnames = [n for n in CNN_WEIGHTS if conv_bias or n != "conv.B"]
    if weights == "initializer":
        return _model(nodes, [x], [y], [_init(n, CNN_WEIGHTS[n]) for n in wnames])
    assert weights == "inputs"
    winputs = [helper.make_tensor_value_info(n, F, list(CNN_WEIGHTS[n])) for n in wnames]
    return _model(nodes, [x, *winputs], [y])


def cnn_expect(batch: int, hw: int = CNN_HW, conv_bias: bool = True) -> dict:
    """Hand-computed costs of :func:`cnn_model` at ``batch`` (per node in CNN_OPS order)."""
    b = batch
    conv_out = b * CNN_C_OUT * hw * hw
    k = CNN_C_IN * CNN_K * CNN_K  # Cin/group * kh * kw
    macs = {
        "Conv": conv_out * k + (conv_out if conv_bias else 0),
        "Relu": conv_out,
        "GlobalAveragePool": conv_out,           # reads every input element
        "Flatten": 0,                            # view
        "Gemm": b * CNN_CLASSES * CNN_C_OUT + b * CNN_CLASSES,  # M*N*K + M*N bias
    }
    params = {
        "Conv": 108 + (4 if conv_bias else 0), "Relu": 0, "GlobalAveragePool": 0, "Flatten": 0,
        "Gemm": 20 + 5,
    }
    out_elems = {"Conv": conv_out, "Relu": conv_out, "GlobalAveragePool": b * CNN_C_OUT,
                 "Flatten": b * CNN_C_OUT, "Gemm": b * CNN_CLASSES}
    out_bytes = {k_: 4 * v for k_, v in out_elems.items()}
    weight_bytes = 4 * sum(params.values())
    input_bytes = 4 * b * CNN_C_IN * hw * hw
    kept = sum(v for op, v in out_bytes.items() if op != "Flatten")  # Flatten is a view
    return {
        "macs": macs, "params": params, "out_elems": out_elems, "out_bytes": out_bytes,
        "total_macs": sum(macs.values()), "total_params": sum(params.values()),
        "weight_bytes": weight_bytes, "activation_bytes": sum(out_bytes.values()),
        "input_bytes": input_bytes,
        "train_memory_estimate_bytes": 4 * weight_bytes + input_bytes + kept,
        "edges": {(0, 1), (1, 2), (2, 3), (3, 4)},
    }


# --------------------------------------------------------------------------------------------
# Shared weight: h = x @ W ; y = h @ W  (W counted once)
# --------------------------------------------------------------------------------------------
def shared_weight_model(d: int = 4) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", d])
    y = helper.make_tensor_value_info("y", F, ["N", d])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["h", "W"], ["y"], name="mm2")]
    return _model(nodes, [x], [y], [_init("W", (d, d))])


# --------------------------------------------------------------------------------------------
# Diamond with duplicate edges: a = Relu(x); s = Split(a) -> (s0, s1); y = Add(s0, s1);
# z = Mul(y, y): Split->Add carries two tensors and Mul consumes y twice (one edge each).
# --------------------------------------------------------------------------------------------
def multi_edge_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", 8])
    z = helper.make_tensor_value_info("z", F, ["N", 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Split", ["a"], ["s0", "s1"], name="split", axis=1, num_outputs=2)
             if OPSET >= 18 else
             helper.make_node("Split", ["a", "split_sizes"], ["s0", "s1"], name="split", axis=1),
             helper.make_node("Add", ["s0", "s1"], ["y"], name="add"),
             helper.make_node("Mul", ["y", "y"], ["z"], name="mul")]
    return _model(nodes, [x], [z], [_const_i64("split_sizes", [4, 4])])


# --------------------------------------------------------------------------------------------
# Transformer-ish block:  q = x@Wq, k = x@Wk, s = q @ k^T, p = Softmax(s), o = p @ x + bias
# --------------------------------------------------------------------------------------------
TF_D = 8


def transformer_block(seq: str | int = 16) -> onnx.ModelProto:
    """``x[N, seq, 8]``; ``seq`` may be a named symbolic dim (then pass ``dims={'seq': 16}``)."""
    x = helper.make_tensor_value_info("x", F, ["N", seq, TF_D])
    y = helper.make_tensor_value_info("y", F, ["N", seq, TF_D])
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["o"], name="attn"),
        helper.make_node("Add", ["o", "bias"], ["y"], name="add"),
    ]
    inits = [_init("Wq", (TF_D, TF_D)), _init("Wk", (TF_D, TF_D)), _init("bias", (TF_D,))]
    return _model(nodes, [x], [y], inits)


def masked_attention(seq: int = 16) -> onnx.ModelProto:
    """Attention as Hugging Face's BERT and GPT-2 export it: ``x[N, seq, 8]`` and an additive
    padding mask ``mask[N, 1, seq]`` (a data input smaller than the scores); the scores scaled
    (Div), causally masked (Where on a constant) and the padding mask added before the Softmax."""
    x = helper.make_tensor_value_info("x", F, ["N", seq, TF_D])
    mask = helper.make_tensor_value_info("mask", F, ["N", 1, seq])
    y = helper.make_tensor_value_info("y", F, ["N", seq, TF_D])
    nodes = [
        *transformer_block(seq).graph.node[:4],  # q, k, k^T, scores = q @ k^T
        helper.make_node("Div", ["s", "scale"], ["sd"], name="scale"),
        helper.make_node("Where", ["causal", "sd", "neg"], ["sc"], name="causal"),
        helper.make_node("Add", ["sc", "mask"], ["sm"], name="pad"),
        helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["y"], name="attn"),
    ]
    inits = [_init("Wq", (TF_D, TF_D)), _init("Wk", (TF_D, TF_D)), _init("scale", (), value=8.0),
             _init("neg", (), value=-1e4),
             numpy_helper.from_array(np.tril(np.ones((seq, seq), bool)), "causal")]
    return _model(nodes, [x, mask], [y], inits)


def residual_chain(blocks: int = 4, d: int = 32, norm: bool = False) -> onnx.ModelProto:
    """``x[N, d]`` through ``blocks`` residual blocks ``x + W2 relu(W1 x)`` (each a segment of
    activation checkpointing); ``norm``: a LayerNormalization before the first block."""
    x = helper.make_tensor_value_info("x", F, ["N", d])
    nodes, inits, cur = [], [], "x"
    if norm:
        nodes.append(helper.make_node("LayerNormalization", ["x", "ln.g", "ln.b"], ["n"], name="ln", axis=-1))
        inits += [_init("ln.g", (d,)), _init("ln.b", (d,))]
        cur = "n"
    for i in range(blocks):
        nodes += [helper.make_node("MatMul", [cur, f"w1_{i}"], [f"h{i}"], name=f"fc1_{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu_{i}"),
                  helper.make_node("MatMul", [f"r{i}", f"w2_{i}"], [f"o{i}"], name=f"fc2_{i}"),
                  helper.make_node("Add", [cur, f"o{i}"], [f"x{i}"], name=f"res_{i}")]
        inits += [_init(f"w1_{i}", (d, 4 * d)), _init(f"w2_{i}", (4 * d, d))]
        cur = f"x{i}"
    y = helper.make_tensor_value_info(cur, F, ["N", d])
    return _model(nodes, [x], [y], inits)


def text_model(vocab: int = 100, seq: str | int = "seq") -> onnx.ModelProto:
    """Token ids ``ids[N, seq]`` (int64) -> embedding (Gather) -> the :func:`transformer_block`
    ops -> logits: a tiny text model, as transformers' exports start."""
    ids = helper.make_tensor_value_info("ids", I64, ["N", seq])
    y = helper.make_tensor_value_info("y", F, ["N", seq, vocab])
    block = transformer_block(seq)
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["x"], name="embed", axis=0), *block.graph.node,
             helper.make_node("MatMul", ["y0", "Wout"], ["y"], name="logits")]
    nodes[-2].output[0] = "y0"
    inits = [_init("emb", (vocab, TF_D)), *block.graph.initializer, _init("Wout", (TF_D, vocab))]
    return _model(nodes, [ids], [y], inits)


def transformer_expect(batch: int, seq: int = 16) -> dict:
    b, d = batch, TF_D
    macs = {"q": b * seq * d * d, "k": b * seq * d * d, "kt": 0,
            "scores": b * seq * seq * d, "softmax": 5 * b * seq * seq,
            "attn": b * seq * d * seq, "add": b * seq * d}
    return {"macs": macs, "total_macs": sum(macs.values()), "total_params": d * d * 2 + d}


# --------------------------------------------------------------------------------------------
# Shape arithmetic: Reshape(x[N,4,6], Concat(Unsqueeze(Gather(Shape(x), 0)), [8], h))
# where h = [6] (Gather(Shape(x), 2)), or with ``divide`` h = [6 / 2 = 3] (target [N, 8, 3]).
# ``divide`` adds a Div, which forces the numpy shape folder (shape_fold) to run.
# --------------------------------------------------------------------------------------------
def shape_arith_model(divide: bool = False, weight_location: str | None = None
                      ) -> onnx.ModelProto:
    """``y = Relu(Reshape(x, target))``; ``weight_location`` adds an external-data weight."""
    last = 3 if divide else 6
    mid = 4 * 6 // last
    x = helper.make_tensor_value_info("x", F, ["N", 4, 6])
    y = helper.make_tensor_value_info("y", F, ["N", mid, last])
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "i0"], ["n"], name="gather_n", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq_n"),
        helper.make_node("Gather", ["shp", "i2"], ["w"], name="gather_w", axis=0),
    ]
    if divide:
        nodes.append(helper.make_node("Div", ["w", "two"], ["wd"], name="div"))
        w_out = "wd"
    else:
        w_out = "w"
    nodes += [
        helper.make_node("Unsqueeze", [w_out, "ax0"], ["w1"], name="unsq_w"),
        helper.make_node("Concat", ["n1", "mid", "w1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    inits = [_const_i64("i0", 0), _const_i64("i2", 2), _const_i64("ax0", [0]),
             _const_i64("two", 2), _const_i64("mid", [mid])]
    if weight_location is not None:  # y2 = MatMul(Relu(...) , W) with W stored externally
        nodes[-1] = helper.make_node("Relu", ["r"], ["rr"], name="relu")
        nodes.append(helper.make_node("MatMul", ["rr", "W"], ["y"], name="mm"))
        inits.append(external_tensor("W", (last, last), weight_location))
    return _model(nodes, [x], [y], inits)


# --------------------------------------------------------------------------------------------
# >6-D tensor: x[N,144] -> Reshape [N,2,3,2,2,3,2] (7-D) -> Relu -> Reshape [N,144]
# --------------------------------------------------------------------------------------------
HIGH_RANK = (2, 3, 2, 2, 3, 2)


def high_rank_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", 144])
    y = helper.make_tensor_value_info("y", F, ["N", 144])
    nodes = [helper.make_node("Reshape", ["x", "to7"], ["x7"], name="to7"),
             helper.make_node("Relu", ["x7"], ["r7"], name="relu7"),
             helper.make_node("Reshape", ["r7", "to2"], ["y"], name="to2")]
    inits = [_const_i64("to7", [0, *HIGH_RANK]), _const_i64("to2", [0, 144])]
    return _model(nodes, [x], [y], inits)


# --------------------------------------------------------------------------------------------
# LayerNormalization + Gelu (opset 20): in the v2 vocabulary, not in v1's.
# --------------------------------------------------------------------------------------------
def layernorm_gelu_model(d: int = 16) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", d])
    y = helper.make_tensor_value_info("y", F, ["N", d])
    nodes = [helper.make_node("LayerNormalization", ["x", "ln.g", "ln.b"], ["h"], name="ln",
                              axis=-1),
             helper.make_node("Gelu", ["h"], ["y"], name="gelu")]
    return _model(nodes, [x], [y], [_init("ln.g", (d,)), _init("ln.b", (d,))], opset=20)


# --------------------------------------------------------------------------------------------
# An ONNX op outside a vocabulary: Relu -> OP -> Relu
# --------------------------------------------------------------------------------------------
def unknown_op_model(op: str = "Hardmax") -> onnx.ModelProto:
    """``op`` must be a unary, shape-preserving ONNX op (Hardmax, ReduceLogSum w/ keepdims)."""
    x = helper.make_tensor_value_info("x", F, ["N", 10])
    y = helper.make_tensor_value_info("y", F, None)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu_in"),
             helper.make_node(op, ["a"], ["b"], name="odd"),
             helper.make_node("Relu", ["b"], ["y"], name="relu_out")]
    return _model(nodes, [x], [y])


def not_an_op_model() -> onnx.ModelProto:
    """A default-domain op that ONNX does not define at all."""
    return unknown_op_model("NotARealOp")


# --------------------------------------------------------------------------------------------
# Custom domain: x -> com.example:Foo -> Relu; with or without a value_info for Foo's output.
# --------------------------------------------------------------------------------------------
def custom_domain_model(value_info: bool = False, batch: int | str = 1) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, [batch, 4])
    y = helper.make_tensor_value_info("y", F, None)
    nodes = [helper.make_node("Foo", ["x"], ["foo_out"], name="foo", domain="com.example"),
             helper.make_node("Relu", ["foo_out"], ["y"], name="relu")]
    vi = [helper.make_tensor_value_info("foo_out", F, [1, 4])] if value_info else []
    return _model(nodes, [x], [y], value_info=vi, extra_opsets=[("com.example", 1)])


# --------------------------------------------------------------------------------------------
# Control flow
# --------------------------------------------------------------------------------------------
def if_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("y", F, ["N", 4])

    def branch(op, name):
        out = helper.make_tensor_value_info(f"{name}_out", F, ["N", 4])
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"])], name, [], [out])

    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="if",
                              then_branch=branch("Relu", "then"), else_branch=branch("Neg", "else"))]
    return _model(nodes, [x], [y], [numpy_helper.from_array(np.array(0, np.float32), "zero")])


def loop_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("y", F, ["N", 4])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Relu", ["v_in"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, ["N", 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, ["N", 4])])
    nodes = [helper.make_node("Loop", ["trip", "true", "x"], ["y"], name="loop", body=body)]
    inits = [_const_i64("trip", 3), numpy_helper.from_array(np.array(True), "true")]
    return _model(nodes, [x], [y], inits)


# --------------------------------------------------------------------------------------------
# Structurally broken graphs
# --------------------------------------------------------------------------------------------
def cycle_model() -> onnx.ModelProto:
    """a = Add(x, b); b = Relu(a): the two nodes feed each other."""
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("b", F, ["N", 4])
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu")]
    return _model(nodes, [x], [y])


def self_loop_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("a", F, ["N", 4])
    return _model([helper.make_node("Add", ["x", "a"], ["a"], name="selfadd")], [x], [y])


def empty_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    return _model([], [x], [helper.make_tensor_value_info("x", F, ["N", 4])])


# --------------------------------------------------------------------------------------------
# External data (never read: only the dims in the protobuf are used)
# --------------------------------------------------------------------------------------------
def external_tensor(name: str, shape, location: str) -> TensorProto:
    t = TensorProto(name=name, data_type=F, dims=list(shape))
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"),
                 ("length", str(4 * int(np.prod(shape))))):
        t.external_data.add(key=k, value=v)
    return t


def external_data_model(location: str = "weights.bin") -> onnx.ModelProto:
    """The tiny CNN whose Conv weight lives in an external file at ``location``."""
    model = cnn_model()
    init = model.graph.initializer
    idx = next(i for i, t in enumerate(init) if t.name == "conv.W")
    init[idx].CopyFrom(external_tensor("conv.W", CNN_WEIGHTS["conv.W"], location))
    return model


# --------------------------------------------------------------------------------------------
# Huge shapes (no data needed: the weight is a typed graph input)
# --------------------------------------------------------------------------------------------
def huge_matmul_model(m: int = 1000, k: int = 10_000, n: int = 100_000) -> onnx.ModelProto:
    """x[N, m, k] @ W[k, n]: at batch 1, m*k*n MACs (1e12 by default) and k*n params."""
    x = helper.make_tensor_value_info("x", F, ["N", m, k])
    w = helper.make_tensor_value_info("W", F, [k, n])
    y = helper.make_tensor_value_info("y", F, ["N", m, n])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    return _model(nodes, [x, w], [y])


def many_nodes_model(n: int) -> onnx.ModelProto:
    """A chain of ``n`` Relus."""
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    names = ["x"] + [f"t{i}" for i in range(n)]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"r{i}") for i in range(n)]
    return _model(nodes, [x], [helper.make_tensor_value_info(names[-1], F, ["N", 4])])


# --------------------------------------------------------------------------------------------
# Single-op models for the MAC formulas
# --------------------------------------------------------------------------------------------
def conv_model(cin: int = 4, cout: int = 6, k: int = 3, group: int = 2, hw: int = 9,
               stride: int = 2, pad: int = 1, bias: str = "yes") -> onnx.ModelProto:
    """One Conv; ``bias`` is ``"yes"``, ``"no"`` (2 inputs) or ``"empty"`` (input name '')."""
    x = helper.make_tensor_value_info("x", F, ["N", cin, hw, hw])
    y = helper.make_tensor_value_info("y", F, None)
    ins = ["x", "W"] + {"yes": ["B"], "no": [], "empty": [""]}[bias]
    node = helper.make_node("Conv", ins, ["y"], name="conv", kernel_shape=[k, k],
                            strides=[stride, stride], pads=[pad] * 4, group=group)
    inits = [_init("W", (cout, cin // group, k, k))] + ([_init("B", (cout,))] if bias == "yes"
                                                         else [])
    return _model([node], [x], [y], inits)


def gemm_model(k: int = 6, n: int = 3, trans_b: bool = False, bias: str = "yes"
               ) -> onnx.ModelProto:
    """``y = Gemm(A[N, k], B, C)`` with B ``[k, n]`` (or ``[n, k]`` with ``trans_b``)."""
    a = helper.make_tensor_value_info("A", F, ["N", k])
    y = helper.make_tensor_value_info("y", F, None)
    ins = ["A", "B"] + {"yes": ["C"], "no": [], "empty": [""]}[bias]
    node = helper.make_node("Gemm", ins, ["y"], name="gemm", transB=int(trans_b))
    inits = [_init("B", (n, k) if trans_b else (k, n))] + ([_init("C", (n,))] if bias == "yes"
                                                           else [])
    return _model([node], [a], [y], inits)


def pool_model(op: str = "MaxPool", c: int = 3, hw: int = 8, k: int = 2, stride: int = 2
               ) -> onnx.ModelProto:
    """One pooling / reduction op over ``x[N, c, hw, hw]``."""
    x = helper.make_tensor_value_info("x", F, ["N", c, hw, hw])
    y = helper.make_tensor_value_info("y", F, None)
    if op in ("MaxPool", "AveragePool"):
        node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[k, k],
                                strides=[stride, stride])
    elif op.startswith("Reduce"):
        node = helper.make_node(op, ["x"], ["y"], name="pool", axes=[2, 3], keepdims=1)
    else:  # GlobalAveragePool / GlobalMaxPool
        node = helper.make_node(op, ["x"], ["y"], name="pool")
    return _model([node], [x], [y])


# --------------------------------------------------------------------------------------------
# Hostile shape arithmetic ("bombs"): a few hundred bytes whose folded shape values would be
# enormous tensors. The sizes come from Shape(x) arithmetic so that whole-graph inference cannot
# settle them and the numpy shape folder (shape_fold) is what sees them.
# --------------------------------------------------------------------------------------------
def _batch_times(factor: int, out: str) -> list:
    """Nodes computing ``out = [N * factor]`` (int64, shape [1]) from data input ``x[N, 4]``."""
    # Max with 1: ONNX's own data propagation stops at Max, so the folder has to evaluate it
    return [helper.make_node("Shape", ["x"], [f"{out}_s"], start=0, end=1),
            helper.make_node("Max", [f"{out}_s", "one_i"], [f"{out}_d"]),
            helper.make_node("Mul", [f"{out}_d", f"{out}_f"], [out])], \
        _const_i64(f"{out}_f", [factor])


def bomb_model(kind: str, elements: int = 900_000_000, reads_values: bool = False) -> onnx.ModelProto:
    """``kind``: range | constant_of_shape | expand | tile | concat; ~``elements`` at batch 1.

    ``range`` asks for ``Range(0, N * elements, 1)``; the others for a 2-D float tensor of
    ``elements`` elements built from a tiny constant. The model's output is that tensor's shape
    (the issue's bombs: no output depends on the input's values), or with ``reads_values`` the
    sum of the tensor scaled by the input's sum (a model that really computes on it).
    """
    side = int(round(elements ** 0.5))
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("y", I64, None)
    a_nodes, a_init = _batch_times(side, "rows")
    nodes, inits = list(a_nodes), [a_init, _const_i64("cols", [side]), _const_i64("one_i", [1])]
    nodes.append(helper.make_node("Concat", ["rows", "cols"], ["target"], axis=0))
    if kind == "range":
        b_nodes, b_init = _batch_times(elements, "lim")
        nodes, inits = list(b_nodes), [b_init, _const_i64("zero", 0), _const_i64("one", 1),
                                       _const_i64("one_i", [1])]
        nodes += [helper.make_node("Squeeze", ["lim"], ["lim0"]),
                  helper.make_node("Range", ["zero", "lim0", "one"], ["big"])]
    elif kind == "constant_of_shape":
        nodes.append(helper.make_node("ConstantOfShape", ["target"], ["big"],
                                      value=numpy_helper.from_array(np.ones(1, np.float32))))
    elif kind == "expand":
        inits.append(_init("one_f", (1, 1), value=1.0))
        nodes.append(helper.make_node("Expand", ["one_f", "target"], ["big"]))
    elif kind == "tile":
        inits.append(_init("one_f", (1, 1), value=1.0))
        nodes.append(helper.make_node("Tile", ["one_f", "target"], ["big"]))
    elif kind == "concat":  # 64 copies of an Expand just under any cap, joined
        inits.append(_init("one_f", (1, 1), value=1.0))
        nodes.append(helper.make_node("Expand", ["one_f", "target"], ["part"]))
        nodes.append(helper.make_node("Concat", ["part"] * 64, ["big"], axis=0))
    else:
        raise ValueError(kind)
    if reads_values:
        y = helper.make_tensor_value_info("y", F, None)
        nodes += [helper.make_node("Cast", ["big"], ["big_f"], to=F),
                  helper.make_node("ReduceSum", ["x"], ["x_sum"]),
                  helper.make_node("Mul", ["big_f", "x_sum"], ["scaled"]),
                  helper.make_node("ReduceSum", ["scaled"], ["y"])]
    else:
        nodes.append(helper.make_node("Shape", ["big"], ["y"]))
    for i, n in enumerate(nodes):
        n.name = f"n{i}"
    return _model(nodes, [x], [y], inits)


BOMB_KINDS = ["range", "constant_of_shape", "expand", "tile", "concat"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def nested_if_bytes(depth: int) -> bytes:
    """A model whose ``If`` nests ``depth`` deep in then-branches, written at the wire level.

    protobuf's own classes refuse to build (or parse) messages nested past 100 levels, about
    33 graphs here (graph -> node -> attribute -> graph), so the bytes are assembled by hand.
    """
    out = helper.make_tensor_value_info("y", F, ["N", 4]).SerializeToString()
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "leaf", [],
                              []).SerializeToString() + _ld(12, out)
    for i in range(depth):
        attr = _ld(1, b"then_branch") + _varint(20 << 3) + b"\x05" + _ld(6, graph)  # GRAPH
        node = _ld(1, b"cond") + _ld(2, b"y") + _ld(3, f"if{i}".encode()) + _ld(4, b"If") \
            + _ld(5, attr)
        graph = _ld(1, node) + _ld(2, f"g{i}".encode()) + _ld(12, out)
    x = helper.make_tensor_value_info("x", F, ["N", 4]).SerializeToString()
    cond = numpy_helper.from_array(np.array(True), "cond").SerializeToString()
    head = _model([], [], []).SerializeToString()  # opset and IR version; its graph is empty
    return head + _ld(7, graph + _ld(11, x) + _ld(5, cond))


def loop_without_outputs_model() -> onnx.ModelProto:
    """A nameless ``Loop`` with no outputs (its small body computes nothing anyone reads)."""
    model = loop_model()
    node = model.graph.node[0]
    node.name = ""
    del node.output[:]
    model.graph.output[0].name = "x"
    return model


def weighty_mlp(layers: int = 4, width: int = 1024, out_path=None) -> onnx.ModelProto | None:
    """``x[N, width]`` through ``layers`` MatMul+Add+Relu with real (stored) weights.

    ``layers * width**2 * 4`` bytes of weights: 40 layers of 2048 is a GPT-2-small-sized file
    (~670 MB). With ``out_path`` the file is written one layer at a time at the wire level, so
    building it never holds more than one layer in memory, and None is returned.
    """
    x = helper.make_tensor_value_info("x", F, ["N", width])
    y = helper.make_tensor_value_info(f"h{layers}", F, ["N", width])
    nodes, inits = [], []
    for i in range(layers):
        nodes += [helper.make_node("MatMul", [f"h{i}" if i else "x", f"W{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i + 1}"])]
        inits.append(_init(f"b{i}", (width,), value=0.01))
        if out_path is None:
            inits.append(_init(f"W{i}", (width, width), value=0.01))
    model = _model(nodes, [x], [y], inits)
    if out_path is None:
        return model
    with open(out_path, "wb") as f:
        f.write(model.SerializeToString())
        for i in range(layers):  # graph fields merge: each appended initializer joins the graph
            w = _init(f"W{i}", (width, width), value=0.01).SerializeToString()
            f.write(_ld(7, _ld(5, w)))
    return None
