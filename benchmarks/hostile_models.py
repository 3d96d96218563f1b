"""Hostile uploads for the fault benchmark: a few hundred bytes each, built with ``onnx.helper``.

:func:`hostile_bodies` gives every case as ``(name, body, expect)``, every one ``"4xx"``: corrupt
or empty bytes, control flow, nesting past protobuf's limit, a cycle, an external-data escape, an
empty graph, more nodes than the cap, and the shape-arithmetic bombs (``Range``, ``Tile``,
``ConstantOfShape``, ``Expand``, 64 joined ``Expand``; 10**7 to 10**12 elements), whose outputs
depend on the input only through its shape (``no_data_path``, refused before shape inference).

The benchmarks do not import the tests: these are minimal copies of the bomb, loop and nesting
builders of tests/onnx_builders.py (which the tests cross-check against).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _f32(name: str, shape) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def _batch_times(factor: int, out: str) -> tuple[list, onnx.TensorProto]:
    """``out = [max(N, 1) * factor]`` from input ``x[N, 4]`` (Max keeps ONNX's own data
    propagation out, so the featurizer's shape folder is what meets the value)."""
    return [helper.make_node("Shape", ["x"], [f"{out}_s"], start=0, end=1),
            helper.make_node("Max", [f"{out}_s", "one_i"], [f"{out}_d"]),
            helper.make_node("Mul", [f"{out}_d", f"{out}_f"], [out])], _i64(f"{out}_f", [factor])


def bomb(kind: str, elements: int) -> bytes:
    """``kind`` in range / constant_of_shape / expand / tile / concat, about ``elements`` at
    batch 1; the output is the big tensor's shape, so its values are never needed."""
    side = int(round(elements ** 0.5))
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("y", I64, None)
    rows, rows_f = _batch_times(side, "rows")
    nodes = rows + [helper.make_node("Concat", ["rows", "cols"], ["target"], axis=0)]
    inits = [rows_f, _i64("cols", [side]), _i64("one_i", [1]), _f32("one_f", (1, 1))]
    if kind == "range":
        lim, lim_f = _batch_times(elements, "lim")
        nodes = lim + [helper.make_node("Squeeze", ["lim"], ["lim0"]),
                       helper.make_node("Range", ["zero", "lim0", "one"], ["big"])]
        inits = [lim_f, _i64("zero", 0), _i64("one", 1), _i64("one_i", [1])]
    elif kind == "constant_of_shape":
        nodes.append(helper.make_node("ConstantOfShape", ["target"], ["big"],
                                      value=numpy_helper.from_array(np.ones(1, np.float32))))
    elif kind in ("expand", "tile"):
        nodes.append(helper.make_node(kind.capitalize(), ["one_f", "target"], ["big"]))
    elif kind == "concat":
        nodes += [helper.make_node("Expand", ["one_f", "target"], ["part"]),
                  helper.make_node("Concat", ["part"] * 64, ["big"], axis=0)]
    else:
        raise ValueError(kind)
    nodes.append(helper.make_node("Shape", ["big"], ["y"]))
    for i, n in enumerate(nodes):
        n.name = f"n{i}"
    return _model(nodes, [x], [y], inits).SerializeToString()


def loop_model() -> bytes:
    """A ``Loop`` with a small body (once an IndexError inside the featurizer)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Relu", ["v_in"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, ["N", 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, ["N", 4])])
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    y = helper.make_tensor_value_info("y", F, ["N", 4])
    node = helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)
    cond = numpy_helper.from_array(np.array(True), "cond")
    return _model([node], [x], [y], [_i64("trip", 3), cond]).SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def nested_if(depth: int) -> bytes:
    """``If`` nested ``depth`` deep, written at the wire level (protobuf's classes refuse to
    build messages past 100 levels)."""
    out = helper.make_tensor_value_info("y", F, ["N", 4]).SerializeToString()
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "leaf", [],
                              []).SerializeToString() + _ld(12, out)
    for i in range(depth):
        attr = _ld(1, b"then_branch") + _varint(20 << 3) + b"\x05" + _ld(6, graph)
        node = _ld(1, b"cond") + _ld(2, b"y") + _ld(3, f"if{i}".encode()) + _ld(4, b"If") \
            + _ld(5, attr)
        graph = _ld(1, node) + _ld(2, f"g{i}".encode()) + _ld(12, out)
    x = helper.make_tensor_value_info("x", F, ["N", 4]).SerializeToString()
    cond = numpy_helper.from_array(np.array(True), "cond").SerializeToString()
    return _model([], [], []).SerializeToString() + _ld(7, graph + _ld(11, x) + _ld(5, cond))


def relu_chain(n: int) -> bytes:
    """``n`` Relu nodes in a row (the node cap is 200,000)."""
    nodes = [helper.make_node("Relu", [f"h{i}" if i else "x"], [f"h{i + 1}"]) for i in range(n)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 4])],
                  [helper.make_tensor_value_info(f"h{n}", F, ["N", 4])]).SerializeToString()


def small_cnn() -> bytes:
    """A valid Conv-Relu-Gemm classifier (``x[N, 3, 8, 8]``); truncated, a corrupt upload."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", F, ["N", 5])],
                  [_f32("w", (4, 3, 3, 3)), _f32("fc", (5, 4))]).SerializeToString()


def _cycle() -> bytes:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 4])],
                  [helper.make_tensor_value_info("b", F, ["N", 4])]).SerializeToString()


def _external_escape() -> bytes:
    w = TensorProto(name="w", data_type=F, dims=[4, 4])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "64")):
        w.external_data.add(key=k, value=v)
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", F, ["N", 4])],
                  [helper.make_tensor_value_info("y", F, ["N", 4])], [w]).SerializeToString()


def hostile_bodies(include_big: bool = True) -> list[tuple[str, bytes, str]]:
    """Every hostile upload as ``(name, body, expect)``; ``include_big`` adds the 200,001-node
    chain (6.7 MB, about 0.4 s of parsing before the node cap refuses it)."""
    cnn = small_cnn()
    cases = [(f"bomb_{kind}_{elements:.0e}", bomb(kind, elements), "4xx")
             for kind, elements in (("range", 10**12), ("tile", 10**12),
                                    ("constant_of_shape", 9 * 10**8),
                                    ("constant_of_shape", 2 * 10**8), ("expand", 9 * 10**8),
                                    ("tile", 9 * 10**8), ("tile", 2 * 10**8), ("concat", 10**7))]
    cases += [("loop", loop_model(), "4xx"), ("nested_if_60", nested_if(60), "4xx"),
              ("corrupt_protobuf", cnn[: len(cnn) // 3], "4xx"),
              ("random_bytes", np.random.default_rng(0).bytes(4096), "4xx"),
              ("empty_body", b"", "4xx"), ("cycle", _cycle(), "4xx"),
              ("external_data_escape", _external_escape(), "4xx"),
              ("empty_graph", _model([], [], []).SerializeToString(), "4xx")]
    if include_big:
        cases.append(("nodes_200001", relu_chain(200_001), "4xx"))
    return cases


__all__ = ["bomb", "loop_model", "nested_if", "relu_chain", "small_cnn", "hostile_bodies"]
