"""Structured fuzzing: graph-level mutations of valid models never cause an internal error.

Byte-level mutation (test_fuzz.py) mostly exercises the protobuf parser. Here hypothesis edits
parsed models the way a hostile or broken exporter would: op types, attributes, shapes, dims,
constants, domains, opsets, wiring and sub-graphs. Whatever comes out, ``featurize`` returns a
Graph or raises a typed one-line :class:`trappm_ray.errors.ModelError`; anything else fails.
The example budget keeps the run well under a minute on two cores (``FUZZ_EXAMPLES`` raises it).
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import onnx_builders as B
from trappm_ray import errors
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.onnx_io import Limits

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))
BASES = [B.cnn_model(), B.transformer_block(), B.shape_arith_model(divide=True),
         B.layernorm_gelu_model(), B.conv_model(), B.gemm_model(), B.pool_model("AveragePool"),
         B.high_rank_model(), B.bomb_model("constant_of_shape", 10**6),
         B.bomb_model("range", 10**6), B.loop_model(), B.multi_edge_model()]
OPS = ["Relu", "Add", "MatMul", "Conv", "Reshape", "Concat", "Gather", "Range", "Expand", "Tile",
       "ConstantOfShape", "Slice", "Squeeze", "Unsqueeze", "Transpose", "Cast", "Shape", "Loop",
       "If", "Scan", "Gemm", "Split", "Pad", "Resize", "Einsum", "LSTM", "OneHot", "Where",
       "BatchNormalization", "ReduceMean", "Softmax", "TopK", "NonZero", "NotAnOp", ""]
ATTRS = ["axis", "axes", "perm", "kernel_shape", "strides", "pads", "group", "to", "value",
         "keepdims", "transB", "equation", "body", "then_branch", "dilations", "allowzero"]
BIG = st.sampled_from([0, 1, -1, 2, 3, 7, 64, 2**31 - 1, 2**40, -(2**40), 10**12])
INTS = st.lists(BIG, min_size=1, max_size=6)
DTYPES = st.sampled_from([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
                          TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.STRING, 0, 999])


def _small_graph(name: str) -> onnx.GraphProto:
    out = helper.make_tensor_value_info(f"{name}_o", TensorProto.FLOAT, None)
    return helper.make_graph([helper.make_node("Relu", ["x"], [f"{name}_o"])], name, [], [out])


@st.composite
def attribute(draw, name: str) -> onnx.AttributeProto:
    kind = draw(st.sampled_from(["int", "ints", "float", "string", "tensor", "graph"]))
    if kind == "int":
        return helper.make_attribute(name, draw(BIG))
    if kind == "ints":
        return helper.make_attribute(name, draw(INTS))
    if kind == "float":
        return helper.make_attribute(name, draw(st.floats(allow_nan=True)))
    if kind == "string":
        return helper.make_attribute(name, draw(st.sampled_from(["", "ij,jk->ik", "\x00\n", "é"])))
    if kind == "graph":
        return helper.make_attribute(name, _small_graph(f"sub_{name}"))
    return helper.make_attribute(name, draw(tensor("t")))


@st.composite
def tensor(draw, name: str) -> TensorProto:
    dims = draw(st.lists(st.integers(0, 5), max_size=3))
    if draw(st.booleans()):
        return numpy_helper.from_array(np.asarray(draw(st.lists(BIG, min_size=1, max_size=4)),
                                                  np.int64), name)
    t = numpy_helper.from_array(np.ones(dims, np.float32), name)
    if draw(st.booleans()):  # dims that disagree with the data, or a bogus type
        t.dims[:] = draw(st.lists(BIG, max_size=4))
        t.data_type = draw(DTYPES)
    return t


@st.composite
def mutated(draw) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(draw(st.sampled_from(BASES)))
    g = model.graph
    names = sorted({x for n in g.node for x in list(n.input) + list(n.output)}
                   | {vi.name for vi in g.input})
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["op", "attr", "dim", "const", "domain", "wire", "drop",
                                     "opset", "init", "subgraph"]))
        if not g.node:
            break
        node = g.node[draw(st.integers(0, len(g.node) - 1))]
        if what == "op":
            node.op_type = draw(st.sampled_from(OPS))
        elif what == "attr":
            name = draw(st.sampled_from(ATTRS))
            kept = [a for a in node.attribute if a.name != name]
            del node.attribute[:]
            node.attribute.extend(kept + [draw(attribute(name))])
        elif what == "dim" and g.input:
            vi = g.input[draw(st.integers(0, len(g.input) - 1))]
            dims = vi.type.tensor_type.shape.dim
            if dims:
                d = dims[draw(st.integers(0, len(dims) - 1))]
                if draw(st.booleans()):
                    d.dim_value = draw(BIG)
                else:
                    d.dim_param = draw(st.sampled_from(["N", "seq", "", "H"]))
        elif what == "const":
            out = f"c{len(g.node)}"
            g.node.insert(0, helper.make_node("Constant", [], [out], value=draw(tensor(out))))
            node.input.append(out) if not node.input else node.input.__setitem__(
                draw(st.integers(0, len(node.input) - 1)), out)
        elif what == "domain":
            node.domain = draw(st.sampled_from(["", "ai.onnx.ml", "com.microsoft", "x.y"]))
        elif what == "wire" and node.input:
            node.input[draw(st.integers(0, len(node.input) - 1))] = draw(
                st.sampled_from(names + ["", "nowhere"]))
        elif what == "drop":
            g.node.remove(node)
        elif what == "opset":
            model.opset_import[0].version = draw(st.sampled_from([1, 6, 9, 11, 13, 17, 21, 99]))
        elif what == "init" and g.initializer:
            i = draw(st.integers(0, len(g.initializer) - 1))
            g.initializer[i].CopyFrom(draw(tensor(g.initializer[i].name)))
        elif what == "subgraph":
            node.attribute.append(helper.make_attribute("body", _small_graph("body")))
    return model


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(model=mutated(), batch=st.sampled_from([1, 3, None]))
def test_graph_mutations_give_a_graph_or_a_typed_error(model, batch):
    try:
        featurize(model, batch_size=batch, limits=Limits(max_seconds=20))
    except errors.ModelError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(f"{e.code}: ") and 400 <= e.status < 500
    # any other exception (IndexError, KeyError, MemoryError...) fails the test


@pytest.mark.parametrize("data", [B.to_bytes(B.loop_without_outputs_model()),
                                  B.nested_if_bytes(60), B.nested_if_bytes(3)])
def test_control_flow_is_a_typed_error(data):
    with pytest.raises(errors.ModelError) as info:
        featurize(data)
    assert isinstance(info.value, (errors.UnsupportedConstruct, errors.TooDeeplyNested))
