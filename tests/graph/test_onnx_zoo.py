"""The ONNX files that ship inside the ``onnx`` package: real foreign exports, no download.

``light/`` holds the classic model-zoo CNNs (Caffe2 exports, opset 9, batch fixed at 1, every
weight made by ``ConstantOfShape``); ``node/``, ``pytorch-*`` and ``simple/`` hold hundreds of
small single-op and converted models. All must give a graph or a typed one-line error.
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trappm_ray import errors
from trappm_ray.graph.featurize import featurize

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted((DATA / "light").glob("light_*.onnx"))
# Parameters of the published models (VGG-19 143.7M, AlexNet 61.0M, ResNet-50 25.6M with its
# BatchNorm statistics, ...); ZFNet-512 and ShuffleNet from the full zoo files' weight sizes.
PARAMS_M = {"bvlc_alexnet": 61.0, "vgg19": 143.7, "resnet50": 25.6, "inception_v1": 7.0,
            "inception_v2": 11.2, "densenet121": 8.06, "squeezenet": 1.235, "shufflenet": 1.42,
            "zfnet512": 87.3}

pytestmark = pytest.mark.skipif(not LIGHT, reason="this onnx build ships no test data")


def _name(path: Path) -> str:
    return path.stem.removeprefix("light_")


@pytest.mark.parametrize("path", LIGHT, ids=_name)
def test_light_model_params_and_batch_32(path):
    g1, g32 = featurize(path, batch_size=1), featurize(path, batch_size=32)
    expected = PARAMS_M[_name(path)] * 1e6
    assert g1.static["params"] == pytest.approx(expected, rel=0.02)
    assert g32.static["params"] == g1.static["params"]
    assert g1.static["weight_bytes"] == pytest.approx(4 * g1.static["params"], rel=0.01)
    # every weight is counted at the node that uses it, never at the ConstantOfShape making it
    cos = [i for i, op in enumerate(g1.ops) if op == "ConstantOfShape"]
    assert all(g1.params[i] == 0 and g1.macs[i] == 0 and g1.out_bytes[i] == 0 for i in cos)
    # re-bound from the exported batch 1: all the arithmetic scales with the batch
    assert g32.meta["exported_batch"] == 1 and g32.meta["batch_rebound"] is True
    assert g1.meta["batch_rebound"] is False
    assert g32.static["macs"] == pytest.approx(32 * g1.static["macs"], rel=1e-9)
    assert g32.static["batch_size"] == 32


def test_vgg19_params_within_2_percent():
    g = featurize(DATA / "light" / "light_vgg19.onnx", batch_size=32)
    assert abs(g.static["params"] - 143.7e6) / 143.7e6 < 0.02
    conv_params = sum(p for op, p in zip(g.ops, g.params) if op == "Conv")
    assert conv_params == pytest.approx(20.02e6, rel=0.01)  # 16 convolutions, 20.0M


def test_shufflenet_channel_shuffle_reshapes_rebound():
    """Its Reshape targets ([1, 4, 28, 56, 56]) carry the batch: they must follow it."""
    g = featurize(DATA / "light" / "light_shufflenet.onnx", batch_size=32)
    assert g.meta["rebound_targets"] >= 16 and g.meta["unresolved_shapes"] == 0


def test_batch_none_keeps_the_exported_batch():
    g = featurize(DATA / "light" / "light_resnet50.onnx", batch_size=None)
    assert g.static["batch_size"] == 1 and g.meta["batch_rebound"] is False


def _folded_batch_model() -> onnx.ModelProto:
    """x[2, 4, 6] -> Reshape [8, 6] (batch folded into rows) -> Relu -> Reshape [2, 24]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 24])
    nodes = [helper.make_node("Reshape", ["x", "t1"], ["r"], name="fold"),
             helper.make_node("Relu", ["r"], ["a"], name="relu"),
             helper.make_node("Reshape", ["a", "t2"], ["y"], name="unfold")]
    inits = [numpy_helper.from_array(__import__("numpy").array(v, "int64"), n)
             for n, v in (("t1", [8, 6]), ("t2", [2, 24]))]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_batch_that_cannot_be_rebound_is_a_typed_error():
    model = _folded_batch_model()
    assert featurize(model, batch_size=None).static["batch_size"] == 2
    with pytest.raises(errors.FixedBatch) as info:
        featurize(model, batch_size=4)
    msg = str(info.value)
    assert msg.startswith("fixed_batch: ") and "batch_size=None" in msg and "\n" not in msg
    assert isinstance(info.value, errors.UnsupportedConstruct)


# ("node" too where the onnx build ships it; this one ships the others)
SUITES = [s for s in ("node", "pytorch-converted", "pytorch-operator", "simple", "real", "light")
          if any((DATA / s).glob("*/model.onnx")) or any((DATA / s).glob("*.onnx"))]


@pytest.mark.parametrize("suite", SUITES)
def test_onnx_test_models_never_raise_untyped(suite):
    files = sorted((DATA / suite).glob("*/model.onnx")) + sorted((DATA / suite).glob("*.onnx"))
    assert files
    outcomes = {"ok": 0, "error": 0}
    for path in files:
        for batch in (1, 32):
            try:
                featurize(path, batch_size=batch)
                outcomes["ok"] += 1
            except errors.ModelError as e:
                assert "\n" not in str(e), (path, str(e))
                outcomes["error"] += 1
    assert outcomes["ok"] > 0, outcomes
