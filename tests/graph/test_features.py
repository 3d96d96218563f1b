"""Feature sets: trappm-v1 (published layout) and v2."""
from __future__ import annotations

import numpy as np
import pytest

import onnx_builders as B
from trappm_ray.graph import features
from trappm_ray.graph.features import OPS_V1, OPS_V2, V1, V2
from trappm_ray.graph.featurize import featurize

BUILDERS = {
    "cnn": B.cnn_model, "transformer": B.transformer_block, "shape_arith": B.shape_arith_model,
    "high_rank": B.high_rank_model, "layernorm_gelu": B.layernorm_gelu_model,
    "hardmax": B.unknown_op_model, "custom": lambda: B.custom_domain_model(value_info=True),
    "multi_edge": B.multi_edge_model, "conv": B.conv_model,
}


def fz(model, **kw):
    return featurize(B.to_bytes(model), **kw)


@pytest.fixture(scope="module")
def graphs():
    return {name: fz(build(), batch_size=2) for name, build in BUILDERS.items()}


def test_feature_set_registry():
    assert features.get("v1") is V1 and features.get("trappm-v1") is V1
    assert features.get("v2") is V2
    with pytest.raises(ValueError, match="unknown feature set"):
        features.get("v3")
    assert V1.node_dim == 113 and V1.static_dim == 6 and len(OPS_V1) == 98
    assert V1.unknown == "None" and V2.unknown == "other"
    assert len(set(OPS_V2)) == len(OPS_V2) and OPS_V2[V2.op_index("other")] == "other"


# ----------------------------------------------------------------------------- v1
@pytest.mark.parametrize("name", list(BUILDERS))
def test_v1_layout(graphs, name):
    g = graphs[name]
    x = features.node_features(g, "v1")
    assert x.shape == (g.num_nodes, 113) and x.dtype == np.float32
    one_hot = x[:, :98]
    assert set(np.unique(one_hot).tolist()) <= {0.0, 1.0}
    assert (one_hot.sum(1) == 1).all()  # exactly one op per row
    for row, op in zip(one_hot, g.ops):
        assert row.argmax() == (OPS_V1.index(op) if op in OPS_V1 else OPS_V1.index("None"))
    np.testing.assert_array_equal(x[:, 98:104], g.in_shape)
    np.testing.assert_array_equal(x[:, 104:110], g.out_shape)
    np.testing.assert_allclose(x[:, 110], g.macs, rtol=1e-6)
    np.testing.assert_allclose(x[:, 111], g.params, rtol=1e-6)
    np.testing.assert_allclose(x[:, 112], g.weight_bytes + g.out_bytes, rtol=1e-6)


def test_v1_static_values(graphs):
    g = graphs["cnn"]
    s = features.static_features(g, V1)
    want = B.cnn_expect(2)
    assert s.shape == (6,) and s.dtype == np.float32
    assert s.tolist() == [2, 5, 4, want["total_macs"], want["total_params"],
                          want["weight_bytes"] + want["activation_bytes"]]


def test_v1_edges_forward_only(graphs):
    g = graphs["cnn"]
    e = features.edge_index(g, V1)
    assert e.dtype == np.int64
    np.testing.assert_array_equal(e, g.edge_index)


# ----------------------------------------------------------------------------- v2
@pytest.mark.parametrize("name", list(BUILDERS))
def test_v2_dims_match_feature_set(graphs, name):
    g = graphs[name]
    x = features.node_features(g)  # v2 is the default
    s = features.static_features(g, "v2")
    assert x.shape == (g.num_nodes, V2.node_dim) and x.dtype == np.float32
    assert s.shape == (V2.static_dim,) and s.dtype == np.float32
    one_hot = x[:, :len(OPS_V2)]
    assert (one_hot.sum(1) == 1).all()
    assert np.isfinite(x).all() and np.isfinite(s).all()
    assert np.isfinite(features.node_features(g, V1)).all()
    assert np.isfinite(features.static_features(g, V1)).all()


@pytest.mark.parametrize("name", list(BUILDERS))
def test_v2_edges_both_directions(graphs, name):
    g = graphs[name]
    e = features.edge_index(g, V2)
    assert e.dtype == np.int64 and e.shape == (2, 2 * g.num_edges)
    pairs = set(map(tuple, e.T.tolist()))
    assert pairs == {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}
    assert set(map(tuple, g.edge_index.T.tolist())) <= pairs


def test_v2_numeric_features_sane_for_huge_model():
    g = fz(B.huge_matmul_model(), batch_size=1)
    assert g.static["macs"] >= 1e12 and g.macs[0] == 1e12 and g.params[0] == 1e9
    x = features.node_features(g, V2)
    s = features.static_features(g, V2)
    numeric = x[:, len(OPS_V2):]
    assert np.isfinite(x).all() and np.isfinite(s).all()
    assert numeric.min() >= 0 and numeric.max() <= 4, numeric.max()
    assert s.min() >= 0 and s.max() <= 4, s.max()
    # v1 stays unscaled, as published
    assert features.node_features(g, V1)[0, 110] == pytest.approx(1e12, rel=1e-6)
    assert features.static_features(g, V1)[3] == pytest.approx(g.static["macs"], rel=1e-6)


def test_v2_static_is_log_scaled_static(graphs):
    g = graphs["cnn"]
    s = features.static_features(g, V2)
    want = np.log1p([g.static[k] for k in features.V2_STATIC]) / 16
    np.testing.assert_allclose(s, want, rtol=1e-6)


# ----------------------------------------------------------------------------- unknown ops
def test_layernorm_unknown_to_v1_known_to_v2():
    g = fz(B.layernorm_gelu_model())
    assert features.unknown_ops(g, V1) == {"Gelu": 1, "LayerNormalization": 1}
    assert features.unknown_ops(g, V2) == {}
    x1 = features.node_features(g, V1)
    assert (x1[:, OPS_V1.index("None")] == 1).all()
    x2 = features.node_features(g, V2)
    assert x2[0, OPS_V2.index("LayerNormalization")] == 1 and x2[1, OPS_V2.index("Gelu")] == 1


def test_hardmax_unknown_to_v1():
    g = fz(B.unknown_op_model("Hardmax"))
    assert features.unknown_ops(g, V1) == {"Hardmax": 1}
    assert features.unknown_ops(g, V2) == {}
    x1 = features.node_features(g, V1)
    assert x1[1, OPS_V1.index("None")] == 1 and x1[0, OPS_V1.index("Relu")] == 1


def test_op_unknown_to_v2_uses_other_slot():
    assert "ReduceLogSum" not in OPS_V2
    g = fz(B.unknown_op_model("ReduceLogSum"))
    assert features.unknown_ops(g, V2) == {"ReduceLogSum": 1}
    x2 = features.node_features(g, V2)
    assert x2[1, OPS_V2.index("other")] == 1 and x2[1, :len(OPS_V2)].sum() == 1


def test_custom_domain_op_is_unknown_everywhere(graphs):
    g = graphs["custom"]
    for fs in (V1, V2):
        assert features.unknown_ops(g, fs) == {"com.example:Foo": 1}
        assert features.node_features(g, fs)[0, fs.op_index(fs.unknown)] == 1


def test_known_model_has_no_unknown_ops(graphs):
    for fs in (V1, V2):
        assert features.unknown_ops(graphs["cnn"], fs) == {}
