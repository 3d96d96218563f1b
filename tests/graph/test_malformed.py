"""The malformed-input corpus: every bad file is a one-line ModelError naming the problem."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_builders as B
from trappm_ray import errors
from trappm_ray.graph import features
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.onnx_io import Limits

CNN = B.to_bytes(B.cnn_model())


def _truncated() -> bytes:
    return CNN[: len(CNN) // 2]


def _random(seed: int = 0, size: int = 4096) -> bytes:
    return np.random.default_rng(seed).bytes(size)


# name -> (source bytes, featurize kwargs, error class, substrings the message must contain)
BAD = {
    "truncated": (_truncated(), {}, errors.CorruptModel, ["protobuf"]),
    "random_bytes": (_random(), {}, errors.ModelError, []),
    "zero_length": (b"", {}, errors.CorruptModel, ["empty"]),
    "tensor_proto": (onnx.numpy_helper.from_array(np.ones((3, 4), np.float32), "t")
                     .SerializeToString(), {}, errors.ModelError, []),
    "graph_proto": (B.cnn_model().graph.SerializeToString(), {}, errors.ModelError, []),
    "empty_graph": (B.to_bytes(B.empty_model()), {}, errors.EmptyGraph, ["no operator nodes"]),
    "external_dotdot": (B.to_bytes(B.external_data_model("../../etc/passwd")), {},
                        errors.ExternalData, ["conv.W", "../../etc/passwd"]),
    "external_absolute": (B.to_bytes(B.external_data_model("/etc/passwd")), {},
                          errors.ExternalData, ["conv.W", "/etc/passwd"]),
    "cycle": (B.to_bytes(B.cycle_model()), {}, errors.CycleError, ["cycle"]),
    "self_loop": (B.to_bytes(B.self_loop_model()), {}, errors.CycleError, ["selfadd"]),
    "custom_domain_no_shape": (B.to_bytes(B.custom_domain_model(value_info=False)), {},
                               errors.UnresolvedShapes, ["foo", "com.example:Foo"]),
    "if": (B.to_bytes(B.if_model()), {}, errors.UnsupportedConstruct, ["If", "control flow"]),
    "loop": (B.to_bytes(B.loop_model()), {}, errors.UnsupportedConstruct, ["Loop"]),
    "symbolic_spatial": (B.to_bytes(B.cnn_model(hw="H")), {}, errors.UnresolvedShapes,
                         ["resolution", "'x'"]),
    "named_symbolic_dim": (B.to_bytes(B.transformer_block("seq")), {}, errors.UnresolvedShapes,
                           ["seq"]),
    "file_too_large_bytes": (CNN, {"limits": Limits(max_file_bytes=100)}, errors.TooLarge,
                             ["limit 100"]),
    "too_many_nodes": (B.to_bytes(B.many_nodes_model(10)), {"limits": Limits(max_nodes=5)},
                       errors.TooLarge, ["10 nodes", "limit 5"]),
    "not_an_onnx_op": (B.to_bytes(B.not_an_op_model()), {}, errors.ModelError, ["NotARealOp"]),
}


def check_message(err: errors.ModelError, needles) -> None:
    msg = str(err)
    assert msg.strip() and "\n" not in msg and "\r" not in msg, repr(msg)
    assert msg.startswith(f"{err.code}: ") and len(msg) > len(err.code) + 5
    assert "Traceback" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    assert 400 <= err.status < 500


@pytest.mark.parametrize("name", list(BAD))
def test_bad_bytes(name):
    src, kw, cls, needles = BAD[name]
    with pytest.raises(errors.ModelError) as info:
        featurize(src, **kw)
    assert isinstance(info.value, cls), (type(info.value), str(info.value))
    check_message(info.value, needles)


@pytest.mark.parametrize("name", ["truncated", "random_bytes", "zero_length", "empty_graph",
                                  "external_dotdot", "cycle", "if", "not_an_onnx_op"])
def test_bad_files(tmp_path, name):
    """The same corpus read from a path."""
    src, kw, cls, needles = BAD[name]
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(src)
    with pytest.raises(cls) as info:
        featurize(path, **kw)
    check_message(info.value, needles)
    with pytest.raises(cls):
        featurize(str(path), **kw)


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_of_any_size(seed):
    size = [1, 2, 7, 64, 300, 1000, 4096, 20000][seed]
    with pytest.raises(errors.ModelError) as info:
        featurize(_random(seed, size))
    check_message(info.value, [])


@pytest.mark.parametrize("cut", [1, 10, 100, len(CNN) // 4, 3 * len(CNN) // 4, len(CNN) - 1])
def test_truncated_anywhere(cut):
    try:
        featurize(CNN[:cut])
    except errors.ModelError as e:
        check_message(e, [])
    # a prefix that still parses into a complete model may succeed; any other exception fails


def test_file_larger_than_limit(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(CNN)
    with pytest.raises(errors.TooLarge) as info:
        featurize(path, limits=Limits(max_file_bytes=len(CNN) - 1))
    check_message(info.value, [f"{len(CNN):,}"])
    assert info.value.status == 413
    featurize(path, limits=Limits(max_file_bytes=len(CNN)))  # at the limit: fine


def test_node_limit_boundary():
    featurize(B.to_bytes(B.many_nodes_model(5)), limits=Limits(max_nodes=5))
    with pytest.raises(errors.TooLarge):
        featurize(B.to_bytes(B.many_nodes_model(6)), limits=Limits(max_nodes=5))


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_missing_file_or_directory(tmp_path, what):
    path = tmp_path / "nope.onnx"
    if what == "directory":
        path.mkdir()
    with pytest.raises(errors.NotAModel) as info:
        featurize(path)
    check_message(info.value, ["not a file"])


@pytest.mark.parametrize("build,cls", [
    (B.empty_model, errors.EmptyGraph),
    (B.cycle_model, errors.CycleError),
    (onnx.ModelProto, errors.NotAModel),
])
def test_bad_modelproto_objects(build, cls):
    """featurize(ModelProto) applies the same checks as featurize(bytes)."""
    with pytest.raises(cls) as info:
        featurize(build())
    check_message(info.value, [])


def test_max_nodes_applies_to_modelproto():
    with pytest.raises(errors.TooLarge):
        featurize(B.many_nodes_model(6), limits=Limits(max_nodes=5))


# ----------------------------------------------------------------------------- tolerated input
def test_high_rank_tensor_succeeds():
    g = featurize(B.to_bytes(B.high_rank_model()), batch_size=2)
    assert g.num_nodes == 3 and g.meta["unresolved_shapes"] == 0


def test_unknown_op_succeeds_and_is_counted():
    g = featurize(B.to_bytes(B.unknown_op_model("Hardmax")))
    assert features.unknown_ops(g, "v1") == {"Hardmax": 1}
    assert g.macs[1] > 0


def test_custom_domain_with_value_info_succeeds():
    g = featurize(B.to_bytes(B.custom_domain_model(value_info=True)))
    assert features.unknown_ops(g, "v2") == {"com.example:Foo": 1}


def test_benign_external_data_succeeds(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(B.to_bytes(B.external_data_model("weights.bin")))  # weights.bin absent
    g = featurize(path)
    assert g.meta["external_data"] is True and g.static["params"] == 137


def test_symbolic_dims_resolved_when_given():
    assert featurize(B.to_bytes(B.cnn_model(hw="H")), resolution=8).num_nodes == 5
    assert featurize(B.to_bytes(B.transformer_block("seq")), dims={"seq": 4}).num_nodes == 7


def test_every_error_is_a_value_error_subclass():
    # callers that only know ValueError still catch bad models
    for cls in (errors.CorruptModel, errors.NotAModel, errors.EmptyGraph, errors.TooLarge,
                errors.ExternalData, errors.CycleError, errors.UnsupportedConstruct,
                errors.UnresolvedShapes):
        assert issubclass(cls, errors.ModelError) and issubclass(cls, ValueError)
