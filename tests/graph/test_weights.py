"""Weights wherever the exporter put them, and batch re-binding of Expand targets."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from trappm_ray.graph.featurize import featurize

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(shape=("N", 8)):
    return helper.make_tensor_value_info("x", F, list(shape))


def _y():
    return helper.make_tensor_value_info("y", F, None)


def _t(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _by_op(g, op):
    return [float(p) for o, p in zip(g.ops, g.params) if o == op]


def test_transposed_stored_matrix_counted_once_at_the_matmul():
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["y"])]
    g = featurize(_model(nodes, [_x()], [_y()], [_t("W", np.ones((3, 8), np.float32))]))
    assert g.static["params"] == 24 and _by_op(g, "MatMul") == [24] and _by_op(g, "Transpose") == [0]
    assert g.macs[g.ops.index("Transpose")] == 0 and g.out_bytes[g.ops.index("Transpose")] == 0


def test_small_constant_node_in_a_conv_weight_slot():
    w = np.ones((2, 1, 3, 3), np.float32)  # 18 elements: under the old 64-element rule
    nodes = [helper.make_node("Constant", [], ["W"], value=_t("w", w)),
             helper.make_node("Conv", ["x", "W"], ["y"], kernel_shape=[3, 3])]
    g = featurize(_model(nodes, [_x(("N", 1, 5, 5))], [_y()]))
    assert g.static["params"] == 18 and _by_op(g, "Conv") == [18]


def test_constant_of_shape_and_cast_feeding_gemm():
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["W16"],
                              value=_t("v", np.array([0.5], np.float16))),
             helper.make_node("Cast", ["W16"], ["W"], to=F),
             helper.make_node("Gemm", ["x", "W"], ["y"])]
    g = featurize(_model(nodes, [_x()], [_y()], [_t("shape", np.array([8, 5], np.int64))]))
    assert g.static["params"] == 40 and _by_op(g, "Gemm") == [40]
    assert g.static["weight_bytes"] == 160  # as fp32, the type the Gemm uses


def test_scalar_constants_are_not_parameters():
    nodes = [helper.make_node("Constant", [], ["half"], value=_t("h", np.float32(0.5))),
             helper.make_node("Mul", ["x", "half"], ["y"])]
    assert featurize(_model(nodes, [_x()], [_y()])).static["params"] == 0


def test_embedding_table_from_a_constant_subgraph():
    table = np.ones((10, 4), np.float32)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 6])
    nodes = [helper.make_node("Constant", [], ["T"], value=_t("t", table)),
             helper.make_node("Gather", ["T", "ids"], ["y"])]
    g = featurize(_model(nodes, [ids], [_y()]), batch_size=2)
    assert g.static["params"] == 40 and _by_op(g, "Gather") == [40]


def test_expand_target_carrying_the_batch_is_rebound():
    """x[2, 1, 4] -> Expand [2, 3, 4] -> Relu: at batch 5 the target becomes [5, 3, 4]."""
    x = helper.make_tensor_value_info("x", F, [2, 1, 4])
    y = helper.make_tensor_value_info("y", F, [2, 3, 4])
    nodes = [helper.make_node("Expand", ["x", "to"], ["e"], name="expand"),
             helper.make_node("Relu", ["e"], ["y"], name="relu")]
    model = _model(nodes, [x], [y], [_t("to", np.array([2, 3, 4], np.int64))])
    g = featurize(model, batch_size=5)
    assert g.meta["batch_rebound"] and g.meta["rebound_targets"] == 1
    assert list(g.out_shape[1][:3]) == [5, 3, 4]
    assert featurize(model, batch_size=None).static["batch_size"] == 2


@pytest.mark.parametrize("batch", [1, 4])
def test_dynamic_batch_is_never_marked_rebound(batch):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    g = featurize(_model(nodes, [_x()], [_y()]), batch_size=batch)
    assert g.meta["batch_rebound"] is False and g.meta["exported_batch"] is None


def test_weight_standardised_conv_counts_its_weight_once():
    """NF-Net/BiT export: the weight, reshaped twice, standardised by a training-mode
    BatchNormalization whose running-statistics outputs nothing reads, then reshaped for Conv."""
    w = np.ones((1, 4, 18), np.float32)  # a (4, 2, 3, 3) conv weight as [1, out, in*k*k]
    nodes = [helper.make_node("ReduceMean", ["Wt"], ["mean"], axes=[0, 1], keepdims=0),
             helper.make_node("ReduceMean", ["Wt"], ["var"], axes=[0, 1], keepdims=0),
             helper.make_node("BatchNormalization", ["W", "gain", "zero", "mean", "var"],
                              ["Wn", "run_mean", "run_var"], training_mode=1),
             helper.make_node("Reshape", ["Wn", "shape"], ["Wc"]),
             helper.make_node("Conv", ["x", "Wc"], ["y"], kernel_shape=[3, 3])]
    inits = [_t("W", w), _t("Wt", w.transpose(0, 2, 1).copy()), _t("gain", np.ones(4, np.float32)),
             _t("zero", np.zeros(4, np.float32)), _t("shape", np.array([4, 2, 3, 3], np.int64))]
    g = featurize(_model(nodes, [_x(("N", 2, 5, 5))], [_y()], inits))
    assert g.static["params"] == 72 and _by_op(g, "Conv") == [72]  # was 72 + 72 + 8 at the BN
