"""A graph re-batched by arithmetic equals a fresh featurize, on every model it accepts."""
import glob
import os

import numpy as np
import onnx
import pytest
from onnx import helper

import onnx_builders as B
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rebatch import at_batch, batch_terms
from trappm_ray.graph.rows import graph_to_row, row_to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "onnx", "*.onnx")))
ARRAYS = ("macs", "params", "weight_bytes", "out_bytes", "in_shape", "out_shape", "n_in", "n_out",
          "in_elems", "out_elems", "attrs", "edge_index")
# sample models whose shapes never take the batch as a value: re-batched by arithmetic
ACCEPTED = {"convnext_atto", "densenet121", "efficientnet_es", "mnasnet_050", "mobilenetv4_conv_small",
            "poolformerv2_s12", "resnet10t"}


def same(a, b) -> bool:
    return all(np.allclose(np.asarray(getattr(a, k), float), np.asarray(getattr(b, k), float), rtol=1e-12, atol=0)
               for k in ARRAYS) and a.ops == b.ops and set(a.static) == set(b.static) and all(
        np.isclose(a.static[k], b.static[k], rtol=1e-12) for k in a.static)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: os.path.basename(p).split("@")[0])
def test_sample_models_rebatch_exactly_or_refuse(path):
    name = os.path.basename(path).split("@")[0]
    for b0, b in ((32, 256), (3, 7)):
        g = featurize(path, batch_size=b0)
        got = at_batch(g, b)
        assert (got is not None) == (name in ACCEPTED), name
        if got is not None:
            assert same(got, featurize(path, batch_size=b)), (name, b0, b)
            assert same(at_batch(got, b0), g)  # and back


@pytest.mark.parametrize("make", [B.cnn_model, B.conv_model, B.gemm_model, B.pool_model, B.transformer_block,
                                  B.layernorm_gelu_model, B.high_rank_model, B.shared_weight_model, B.shape_arith_model])
def test_builders_rebatch_exactly(make):
    g = featurize(make(), batch_size=4)
    got = at_batch(g, 40)
    assert got is not None and same(got, featurize(make(), batch_size=40))
    assert got.static["batch_size"] == 40 and at_batch(got, 40) is got


def test_refuses_what_it_cannot_prove():
    assert at_batch(featurize(B.cnn_model(), batch_size=1), 8) is None  # every dim is a multiple of 1
    assert at_batch(featurize(B.cnn_model(batch=2), batch_size=4), 8) is None  # exported at a fixed batch
    stored = row_to_graph(graph_to_row(featurize(B.cnn_model(), batch_size=4), arch="cnn"))
    assert batch_terms(stored) is None  # a graph read back from a corpus: no featurize to re-read
    # the batch moved off axis 0 (x.transpose(0, 1)): the shape slots could not be told apart
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16, 8])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [16, "N", 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2])],
                                                "t", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    assert at_batch(featurize(model, batch_size=4), 8) is None
