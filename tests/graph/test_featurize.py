"""Exact costs of tiny hand-built graphs (see tests/onnx_builders.py for the worked answers)."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

import onnx_builders as B
from trappm_ray import errors
from trappm_ray.graph.featurize import VIEW_OPS, Graph, featurize


def fz(model: onnx.ModelProto, **kw) -> Graph:
    return featurize(B.to_bytes(model), **kw)


def per_op(graph: Graph, values) -> dict:
    assert len(set(graph.ops)) == len(graph.ops), "per_op needs distinct op names"
    return dict(zip(graph.ops, np.asarray(values).tolist()))


def edges(graph: Graph) -> list[tuple[int, int]]:
    return [tuple(e) for e in graph.edge_index.T.tolist()]


# ----------------------------------------------------------------------------- the tiny CNN
@pytest.mark.parametrize("batch", [1, 3])
def test_cnn_exact_per_node(batch):
    g = fz(B.cnn_model(), batch_size=batch)
    want = B.cnn_expect(batch)
    assert g.ops == B.CNN_OPS
    assert per_op(g, g.macs) == want["macs"]
    assert per_op(g, g.params) == want["params"]
    assert per_op(g, g.out_elems) == want["out_elems"]
    assert per_op(g, g.out_bytes) == want["out_bytes"]
    assert per_op(g, g.weight_bytes) == {k: 4 * v for k, v in want["params"].items()}
    assert set(edges(g)) == want["edges"] and g.num_edges == 4
    s = g.static
    assert s["macs"] == want["total_macs"] and s["params"] == want["total_params"] == 137
    assert s["weight_bytes"] == want["weight_bytes"] == 548
    assert s["activation_bytes"] == want["activation_bytes"]
    assert s["batch_size"] == batch and s["nodes"] == 5 and s["edges"] == 4
    assert g.meta["data_inputs"] == ["x"] and g.meta["external_data"] is False
    assert g.meta["unresolved_shapes"] == 0 and g.meta["opset"] == B.OPSET


def test_cnn_conv_macs_formula_by_hand():
    # Conv 3->4, 3x3, pad 1 on 8x8: out = 4*8*8 = 256 elements, each 3*3*3 = 27 MACs, + bias.
    g = fz(B.cnn_model(), batch_size=1)
    assert g.macs[0] == 256 * 27 + 256 == 7168
    assert g.macs[4] == 1 * 5 * 4 + 5  # Gemm M*N*K + M*N
    assert g.attrs[0].tolist() == [9, 1, 1]  # kernel 3x3, stride 1x1, group 1


def test_train_memory_estimate_by_hand():
    # 4 * weight bytes (weights, grads, two Adam moments) + input bytes + kept activations
    # (every non-view op output: Conv, Relu, GAP, Gemm; not Flatten).
    g = fz(B.cnn_model(), batch_size=1)
    weight_bytes = 137 * 4
    input_bytes = 3 * 8 * 8 * 4
    kept = (256 + 256 + 4 + 5) * 4
    assert g.static["train_memory_estimate_bytes"] == 4 * weight_bytes + input_bytes + kept == 5044
    assert B.cnn_expect(1)["train_memory_estimate_bytes"] == 5044
    g2 = fz(B.cnn_model(), batch_size=2)
    assert g2.static["train_memory_estimate_bytes"] == B.cnn_expect(2)[
        "train_memory_estimate_bytes"]
    assert "Flatten" in VIEW_OPS


@pytest.mark.parametrize("variant", [
    dict(weights="initializer"),
    dict(weights="inputs"),            # export_params=False, symbolic batch
    dict(weights="inputs", batch=1),   # export_params=False, every shape static
])
def test_weights_as_inputs_give_same_costs(variant):
    ref = fz(B.cnn_model(), batch_size=2)
    g = fz(B.cnn_model(**variant), batch_size=2)
    assert g.meta["data_inputs"] == ["x"]
    for field in ("macs", "params", "weight_bytes", "out_bytes", "in_elems", "out_elems"):
        np.testing.assert_array_equal(getattr(g, field), getattr(ref, field), err_msg=field)
    np.testing.assert_array_equal(g.edge_index, ref.edge_index)
    assert g.static == ref.static


def test_modelproto_input_is_not_modified_and_matches_bytes():
    model = B.cnn_model()
    before = model.SerializeToString()
    g = featurize(model, batch_size=3)
    assert model.SerializeToString() == before
    assert g.static == fz(B.cnn_model(), batch_size=3).static


# ----------------------------------------------------------------------------- MAC formulas
@pytest.mark.parametrize("bias", ["yes", "no", "empty"])
def test_conv_grouped_strided(bias):
    # x[2,4,9,9], W[6, 4/2, 3, 3], stride 2, pad 1 -> y[2,6,5,5]
    g = fz(B.conv_model(bias=bias), batch_size=2)
    out = 2 * 6 * 5 * 5
    assert g.out_shape[0].tolist() == [2, 6, 5, 5, 0, 0]
    assert g.macs[0] == out * (4 // 2) * 3 * 3 + (out if bias == "yes" else 0)
    assert g.params[0] == 6 * 2 * 3 * 3 + (6 if bias == "yes" else 0)
    assert g.attrs[0].tolist() == [9, 4, 2]  # kernel 3*3, stride 2*2, group 2


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("bias", ["yes", "no", "empty"])
def test_gemm(trans_b, bias):
    g = fz(B.gemm_model(k=6, n=3, trans_b=trans_b, bias=bias), batch_size=2)
    m, n, k = 2, 3, 6
    assert g.macs[0] == m * n * k + (m * n if bias == "yes" else 0)
    assert g.params[0] == k * n + (n if bias == "yes" else 0)


@pytest.mark.parametrize("op,out_shape,macs", [
    ("MaxPool", [2, 3, 4, 4], 2 * 3 * 4 * 4 * (2 * 2)),      # out elems * kernel
    ("AveragePool", [2, 3, 4, 4], 2 * 3 * 4 * 4 * (2 * 2)),
    ("GlobalAveragePool", [2, 3, 1, 1], 2 * 3 * 8 * 8),      # input elems
    ("GlobalMaxPool", [2, 3, 1, 1], 2 * 3 * 8 * 8),
    ("ReduceMean", [2, 3, 1, 1], 2 * 3 * 8 * 8),
])
def test_pooling_and_reductions(op, out_shape, macs):
    g = fz(B.pool_model(op), batch_size=2)
    assert g.ops == [op]
    assert g.out_shape[0].tolist()[:4] == out_shape
    assert g.macs[0] == macs and g.params[0] == 0


def test_transformer_block_matmul_softmax():
    g = fz(B.transformer_block(16), batch_size=2)
    want = B.transformer_expect(2, 16)
    names = [n.name for n in B.transformer_block(16).graph.node]  # file order is topological
    assert dict(zip(names, g.macs.tolist())) == want["macs"]
    assert g.static["macs"] == want["total_macs"]
    assert g.static["params"] == want["total_params"]
    # MatMul = out elems * K: scores q[2,16,8] @ kt[2,8,16] -> 2*16*16 outputs, K = 8
    assert g.macs[names.index("scores")] == 2 * 16 * 16 * 8


def test_named_symbolic_dim_bound_by_dims():
    ref = fz(B.transformer_block(16), batch_size=2)
    g = fz(B.transformer_block("seq"), batch_size=2, dims={"seq": 16})
    np.testing.assert_array_equal(g.macs, ref.macs)
    assert g.static == ref.static


def test_layernorm_gelu_element_costs():
    g = fz(B.layernorm_gelu_model(16), batch_size=3)
    assert g.ops == ["LayerNormalization", "Gelu"]
    assert g.macs.tolist() == [8 * 3 * 16, 8 * 3 * 16]
    assert g.params.tolist() == [32, 0]
    assert g.meta["opset"] == 20


# ----------------------------------------------------------------------------- params & edges
def test_shared_weight_counted_once():
    g = fz(B.shared_weight_model(4), batch_size=2)
    assert g.params.tolist() == [16, 0]
    assert g.static["params"] == 16 and g.static["weight_bytes"] == 64
    assert g.macs.tolist() == [2 * 4 * 4, 2 * 4 * 4]
    assert edges(g) == [(0, 1)]


def test_edges_forward_and_deduplicated():
    # Relu -> Split -(s0, s1)-> Add -(y, y)-> Mul: one edge per producer/consumer pair.
    g = fz(B.multi_edge_model())
    assert g.ops == ["Relu", "Split", "Add", "Mul"]
    assert edges(g) == [(0, 1), (1, 2), (2, 3)]
    assert g.edge_index.dtype == np.int32 and g.edge_index.shape == (2, 3)


@pytest.mark.parametrize("build", [B.cnn_model, B.transformer_block, B.multi_edge_model,
                                   B.shape_arith_model, B.high_rank_model])
def test_edges_point_forward_in_topological_order(build):
    g = fz(build())
    src, dst = g.edge_index
    assert (src < dst).all()
    assert len(set(edges(g))) == g.num_edges


# ----------------------------------------------------------------------------- batch scaling
def test_batch_scales_activations_and_macs_not_params():
    g1 = fz(B.cnn_model(), batch_size=1)
    for b in (2, 5):
        gb = fz(B.cnn_model(), batch_size=b)
        for field in ("macs", "out_bytes", "out_elems", "in_elems"):
            np.testing.assert_array_equal(getattr(gb, field), b * getattr(g1, field))
        np.testing.assert_array_equal(gb.params, g1.params)
        np.testing.assert_array_equal(gb.weight_bytes, g1.weight_bytes)
        assert gb.static["macs"] == b * g1.static["macs"]
        assert gb.static["activation_bytes"] == b * g1.static["activation_bytes"]
        assert gb.static["params"] == g1.static["params"]
        assert gb.in_shape[0, 0] == b and gb.out_shape[-1, 0] == b


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError):
        fz(B.cnn_model(), batch_size=0)


# ----------------------------------------------------------------------------- node order
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_shuffled_node_order_gives_same_graph(seed):
    ref = fz(B.cnn_model(), batch_size=2)
    shuffled = B.cnn_model(shuffle_seed=seed)
    g = fz(shuffled, batch_size=2)
    assert g.ops == B.CNN_OPS  # a chain has one topological order
    for field in ("macs", "params", "out_bytes", "in_shape", "out_shape", "attrs"):
        np.testing.assert_array_equal(getattr(g, field), getattr(ref, field), err_msg=field)
    np.testing.assert_array_equal(g.edge_index, ref.edge_index)
    assert g.static == ref.static


def test_shuffled_dag_same_totals():
    model = B.transformer_block(16)
    ref = featurize(model, batch_size=2)
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    g = featurize(model, batch_size=2)
    assert g.static == ref.static
    assert sorted(zip(g.ops, g.macs.tolist())) == sorted(zip(ref.ops, ref.macs.tolist()))
    assert (g.edge_index[0] < g.edge_index[1]).all()


# ----------------------------------------------------------------------------- shape arithmetic
@pytest.mark.parametrize("divide", [False, True])  # Div forces the numpy shape folder to run
@pytest.mark.parametrize("batch", [1, 7])
def test_shape_arithmetic_reshape_resolved(batch, divide):
    g = fz(B.shape_arith_model(divide=divide), batch_size=batch)
    target = [batch, 8, 3] if divide else [batch, 4, 6]
    reshape, relu = g.ops.index("Reshape"), g.ops.index("Relu")
    assert g.out_shape[reshape].tolist()[:3] == target
    assert g.out_shape[relu].tolist()[:3] == target
    assert g.macs[relu] == batch * 24
    assert g.meta["unresolved_shapes"] == 0
    assert g.static["macs"] == batch * 24 + (1 if divide else 0)  # scalar Div costs 1


# ----------------------------------------------------------------------------- totals
@pytest.mark.parametrize("build", [B.cnn_model, B.transformer_block, B.shape_arith_model,
                                   B.layernorm_gelu_model, B.high_rank_model,
                                   B.shared_weight_model, B.multi_edge_model])
def test_static_totals_equal_sums(build):
    g = fz(build(), batch_size=3)
    s = g.static
    assert s["nodes"] == g.num_nodes == len(g.ops)
    assert s["edges"] == g.num_edges
    assert s["macs"] == pytest.approx(g.macs.sum())
    assert s["params"] == g.params.sum()
    assert s["weight_bytes"] == g.weight_bytes.sum()
    assert s["activation_bytes"] == g.out_bytes.sum()
    for arr in (g.macs, g.params, g.weight_bytes, g.out_bytes, g.in_shape, g.out_shape,
                g.n_in, g.n_out, g.in_elems, g.out_elems, g.attrs):
        assert len(arr) == g.num_nodes
    summary = g.summary()
    assert summary["nodes"] == g.num_nodes and summary["params"] == int(s["params"])


# ----------------------------------------------------------------------------- resolution
def test_resolution_reported_from_input():
    assert fz(B.cnn_model(hw=8)).static["resolution"] == 8
    assert fz(B.cnn_model(hw=12)).static["resolution"] == 12


def test_symbolic_spatial_dims_bound_by_resolution():
    g = fz(B.cnn_model(hw="H"), batch_size=2, resolution=12)
    want = B.cnn_expect(2, hw=12)
    assert g.static["resolution"] == 12
    assert per_op(g, g.macs) == want["macs"]
    assert g.in_shape[0].tolist() == [2, 3, 12, 12, 0, 0]


def test_a_resolution_a_fixed_size_input_cannot_take_is_refused():
    """A file exported at 8 px keeps its 8-px work whatever resolution is asked: the answer would
    report one size with the cost of another, so it is refused in words instead."""
    assert fz(B.cnn_model(hw=8), batch_size=2, resolution=8).static["resolution"] == 8
    with pytest.raises(errors.UnsupportedConstruct, match="fixes its size.*resolution of 12"):
        fz(B.cnn_model(hw=8), batch_size=2, resolution=12)
    with pytest.raises(errors.UnsupportedConstruct, match="fixes its size"):
        fz(B.gemm_model(), batch_size=2, resolution=12)  # no spatial dimensions at all


# ----------------------------------------------------------------------------- > 6-D tensors
def test_high_rank_folds_leading_dims():
    b = 3
    g = fz(B.high_rank_model(), batch_size=b)
    assert g.ops == ["Reshape", "Relu", "Reshape"]
    folded = [b * B.HIGH_RANK[0], *B.HIGH_RANK[1:]]  # 7-D [b,2,3,2,2,3,2] -> 6 slots
    assert g.out_shape[0].tolist() == folded
    assert g.in_shape[1].tolist() == folded and g.out_shape[1].tolist() == folded
    assert math.prod(folded) == b * 144  # element count kept
    assert g.out_shape[2].tolist() == [b, 144, 0, 0, 0, 0]
    assert g.macs[1] == b * 144 and g.out_elems[1] == b * 144


# ----------------------------------------------------------------------------- external data
@pytest.mark.parametrize("file_there", [False, True])
def test_external_data_not_read(tmp_path, monkeypatch, file_there):
    """Only dims are used: no external file is opened, whether or not 'weights.bin' exists."""
    monkeypatch.chdir(tmp_path)
    if file_there:  # far too short: any attempt to read it fails
        (tmp_path / "weights.bin").write_bytes(b"\0" * 3)
    g = fz(B.external_data_model("weights.bin"), batch_size=2)
    ref = fz(B.cnn_model(), batch_size=2)
    assert g.meta["external_data"] is True
    assert g.static == ref.static
    # the numpy shape folder (shape_fold) runs here too and must skip the external tensor
    g = fz(B.shape_arith_model(divide=True, weight_location="weights.bin"), batch_size=2)
    assert g.meta["external_data"] is True and g.meta["unresolved_shapes"] == 0
    assert g.params[g.ops.index("MatMul")] == 9
    assert g.out_shape[g.ops.index("MatMul")].tolist()[:3] == [2, 8, 3]


def test_custom_domain_with_value_info():
    g = fz(B.custom_domain_model(value_info=True))
    assert g.ops == ["com.example:Foo", "Relu"]
    assert g.out_shape[0].tolist()[:2] == [1, 4] and g.macs.tolist() == [4, 4]


def test_unknown_op_gets_default_cost():
    g = fz(B.unknown_op_model("Hardmax"), batch_size=2)
    assert g.ops == ["Relu", "Hardmax", "Relu"]
    assert g.macs.tolist() == [20, 20, 20]


def test_cycle_raises_cycle_error():
    with pytest.raises(errors.CycleError):
        fz(B.cycle_model())


def test_a_text_model_is_keyed_by_its_sequence_length_like_the_corpus_keys_it():
    """Predictors were trained on text graphs whose resolution is the sequence length (the corpus's
    graph key); a user's file must be featurized the same way, and be known as a text model."""
    text = featurize(B.text_model(), batch_size=2, dims={"seq": 128})
    assert text.static["resolution"] == 128 and text.meta["token_ids"]
    block = featurize(B.transformer_block(), batch_size=2)  # float activations in: not token ids
    assert block.static["resolution"] == 0 and not block.meta["token_ids"]
    cnn = featurize(B.cnn_model(), batch_size=2)
    assert cnn.static["resolution"] == B.CNN_HW and not cnn.meta["token_ids"]
