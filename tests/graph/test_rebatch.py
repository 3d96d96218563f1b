"""A graph re-batched by arithmetic equals a fresh featurize, on every model it accepts."""
import glob
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_builders as B
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rebatch import at_batch, batch_terms
from trappm_ray.graph.rows import graph_to_row, row_to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "onnx", "*.onnx")))
ARRAYS = ("macs", "params", "weight_bytes", "out_bytes", "in_shape", "out_shape", "n_in", "n_out",
          "in_elems", "out_elems", "attrs", "edge_index")


def same(a, b) -> bool:
    return all(np.allclose(np.asarray(getattr(a, k), float), np.asarray(getattr(b, k), float), rtol=1e-12, atol=0)
               for k in ARRAYS) and a.ops == b.ops and set(a.static) == set(b.static) and all(
        np.isclose(a.static[k], b.static[k], rtol=1e-12) for k in a.static)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: os.path.basename(p).split("@")[0])
def test_sample_models_rebatch_exactly(path):
    """Convnets, ViT (the class token expanded to the batch computed from the input's shape),
    Swin (windows padded, batch folded into windows and back), Visformer (the batch moved to
    axis 1 by attention's permute)."""
    for b0, b in ((32, 256), (3, 7), (1, 64)):
        g = featurize(path, batch_size=b0)
        got = at_batch(g, b)
        assert got is not None and same(got, featurize(path, batch_size=b)), (path, b0, b)
        assert same(at_batch(got, b0), g)  # and back


@pytest.mark.parametrize("make", [B.cnn_model, B.conv_model, B.gemm_model, B.pool_model, B.transformer_block,
                                  B.layernorm_gelu_model, B.high_rank_model, B.shared_weight_model, B.shape_arith_model,
                                  B.text_model])
def test_builders_rebatch_exactly(make):
    dims = {"seq": 16} if make is B.text_model else None
    for b0 in (4, 1):
        g = featurize(make(), batch_size=b0, dims=dims)
        got = at_batch(g, 40)
        assert got is not None and same(got, featurize(make(), batch_size=40, dims=dims))
        assert got.static["batch_size"] == 40 and at_batch(got, 40) is got


def _model(nodes, x_shape, y_shape, inits=()) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, y_shape)
    return helper.make_model(helper.make_graph(nodes, "t", [x], [y], initializer=list(inits)),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_refuses_what_it_cannot_prove():
    assert at_batch(featurize(B.cnn_model(batch=2), batch_size=4), 8) is None  # exported at a fixed batch
    stored = row_to_graph(graph_to_row(featurize(B.cnn_model(), batch_size=4), arch="cnn"))
    assert batch_terms(stored) is None  # a graph read back from a corpus: no featurize to re-read
    assert at_batch(featurize(B.unknown_op_model(), batch_size=4), 8) is None  # a custom op
    # x^T x sums over the batch; a mean over it; a constant reshape target that fixes it
    gram = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("MatMul", ["t", "x"], ["y"])],
                  ["N", 8], [8, 8])
    mean = _model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], keepdims=1)], ["N", 8], [1, 8])
    fixed = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])], ["N", 8], [4, 16],
                   [numpy_helper.from_array(np.array([4, 16], np.int64), "shape")])
    for model in (gram, mean):
        for b0 in (4, 1):
            assert at_batch(featurize(model, batch_size=b0), 8) is None
    assert at_batch(featurize(fixed, batch_size=8), 16) is None


def test_the_batch_followed_off_axis_0():
    moved = _model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2])], ["N", 16, 8], [16, "N", 8])
    g = featurize(moved, batch_size=4)
    assert same(at_batch(g, 12), featurize(moved, batch_size=12))
