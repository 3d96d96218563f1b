"""The dynamo exporter as the corpus's fallback, on tiny hand-built modules.

Each module has the construct that made a timm family fail with the legacy exporter: VOLO's
fold (``aten::col2im``, no ONNX op before opset 18), HaloNet's ``unfold`` of a padded tensor
(no static size for the legacy exporter), CondConv's per-sample kernels (the batch is the
convolution's ``groups`` attribute, so no graph has a dynamic batch).
"""
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from trappm_ray import errors
from trappm_ray.corpus import export, fallback, sources, zoo
from trappm_ray.corpus.build import build_shard
from trappm_ray.graph.featurize import featurize


class Fold(torch.nn.Module):
    """Outlook-attention-like: unfold 3x3 patches, mix them, fold them back (overlap-add)."""

    def __init__(self, c=3):
        super().__init__()
        self.mix = torch.nn.Linear(c * 9, c * 9)
        self.head = torch.nn.Linear(c, 5)

    def forward(self, x):
        cols = F.unfold(x, 3, padding=1)  # [B, C*9, H*W]
        cols = self.mix(cols.transpose(1, 2)).transpose(1, 2)
        y = F.fold(cols, x.shape[-2:], 3, padding=1)
        return self.head(y.mean((2, 3)))


class PaddedUnfold(torch.nn.Module):
    """HaloAttn-like: blocks with a halo, ``Tensor.unfold`` of a padded map."""

    def __init__(self, c=4):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, c, 3, padding=1)

    def forward(self, x):
        kv = F.pad(self.conv(x), [1, 1, 1, 1])
        kv = kv.unfold(2, 6, 4).unfold(3, 6, 4)  # [B, C, nH, nW, 6, 6]
        return kv.flatten(2).mean(-1)


class CondConv(torch.nn.Module):
    """timm's CondConv2d routed by the input's global average: per-sample kernels."""

    def __init__(self, c=4):
        super().__init__()
        from timm.layers import CondConv2d

        self.route = torch.nn.Linear(3, 2)
        self.conv = CondConv2d(3, c, 3, padding=1, num_experts=2)

    def forward(self, x):
        routing = torch.sigmoid(self.route(x.mean((2, 3))))
        return self.conv(x, routing).mean((2, 3))


def _dynamo(model, res=8, **kw):
    model.eval()
    return export.export_dynamo(model, (torch.randn(2, 3, res, res),), ["input"], **kw)


def _legacy(model, res=8):
    return export.export_legacy(model.eval(), (torch.randn(1, 3, res, res),), ["input"],
                                {"input": {0: "batch"}, "output": {0: "batch"}})


def test_fold_exports_with_dynamo_as_col2im_and_is_costed():
    model = Fold()
    with pytest.raises(Exception, match="col2im"):
        _legacy(model)
    g = featurize(_dynamo(model), batch_size=3, resolution=8)
    i = g.ops.index("Col2Im")
    assert g.out_shape[i][:4].tolist() == [3, 3, 8, 8]
    assert g.in_shape[i][:3].tolist() == [3, 27, 64]
    assert g.macs[i] == 3 * 27 * 64  # one addition per column element
    assert g.static["params"] == sum(p.numel() for p in model.parameters())
    assert featurize(_dynamo(model), batch_size=6, resolution=8).macs[i] == 2 * g.macs[i]


def test_unfold_of_padded_tensor_exports_with_dynamo():
    model = PaddedUnfold()
    with pytest.raises(Exception, match="Unfold"):
        _legacy(model, res=16)
    data = _dynamo(model, res=16)
    for bs in (1, 5):
        g = featurize(data, batch_size=bs, resolution=16)
        shapes = [s[:3] for s in g.out_shape.tolist()]
        assert [bs, 4, 4 * 4 * 36] in shapes  # C, (nH x nW blocks of 6 x 6) after flatten(2)
        assert g.out_shape[-1][:3].tolist() == [bs, 4, 0] and g.meta["unresolved_shapes"] == 0


def test_condconv_exports_at_each_fixed_batch_without_a_zero_bias():
    # no dynamic batch (groups = batch): build_shard's test below sees that export fail
    model = CondConv().eval()
    graphs = {bs: featurize(export.export_dynamo(model, (torch.randn(bs, 3, 8, 8),), ["input"],
                                                 dynamic_batch=False), batch_size=bs, resolution=8)
              for bs in (2, 6)}
    torch_params = sum(p.numel() for p in model.parameters())
    for bs, g in graphs.items():
        # no zero bias of batch x channels (the exporter's stand-in for "no bias") is counted
        assert g.static["params"] == torch_params and "Expand" not in g.ops
        assert g.attrs[g.ops.index("Conv")][2] == bs  # groups = batch
    assert graphs[6].static["macs"] == 3 * graphs[2].static["macs"]


def _conv_with_expanded_bias(fill: float):
    nodes = [helper.make_node("Expand", ["fill", "bias_shape"], ["bias"]),
             helper.make_node("Conv", ["x", "w", "bias"], ["y"])]
    inits = [numpy_helper.from_array(np.array(fill, np.float32), "fill"),
             numpy_helper.from_array(np.array([4], np.int64), "bias_shape")]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph)


def test_zero_bias_stand_in_is_dropped_and_a_real_bias_kept():
    # above the exporter's constant-folding size (batch x channels > 2^18) the stand-in for "no
    # bias" stays an Expand of 0 (efficientnet_cc at batch 1024), which would count as weights
    zero, real = _conv_with_expanded_bias(0.0), _conv_with_expanded_bias(0.5)
    export._drop_zero_conv_bias(zero)
    export._drop_zero_conv_bias(real)
    assert [(n.op_type, list(n.input)) for n in zero.graph.node] == [("Conv", ["x", "w"])]
    assert not zero.graph.initializer
    assert [n.op_type for n in real.graph.node] == ["Expand", "Conv"]


def test_retryable_errors_are_the_exporter_dependent_ones():
    assert fallback.retryable(errors.UnresolvedShapes("x"))
    assert fallback.retryable(errors.FixedBatch("x"))  # an UnsupportedConstruct
    assert not fallback.retryable(errors.TooLarge("x"))


def test_unregistered_timm_architecture_builds_from_its_config():
    # semobilevit_s: in the installed timm's mobilevit.model_cfgs, no longer a model name
    assert zoo.count_params("semobilevit_s", 256) == 5_737_392


@pytest.fixture
def tiny_timm(monkeypatch):
    """``zoo.create_model`` builds the named tiny module instead of a timm model."""
    models = {"tiny_fold": Fold, "tiny_condconv": CondConv}

    def create(arch, resolution, device=None, **kw):
        if device is not None:
            with torch.device(device):
                return models[arch]()
        return models[arch]()

    monkeypatch.setattr(zoo, "create_model", create)


def test_build_shard_falls_back_to_dynamo_where_legacy_export_fails(tiny_timm, tmp_path):
    entry = build_shard("tiny_fold", 8, (1, 4), str(tmp_path), meta_init=True)
    assert entry["status"] == "ok" and entry["graphs"] == 2 and not entry["failed_batch_sizes"]
    assert entry["exporter"].startswith("torch.onnx dynamo") and "dynamic batch" in entry["exporter"]
    rows = pq.read_table(tmp_path / entry["shard"]).to_pylist()
    assert [r["batch_size"] for r in rows] == [1, 4] and all("Col2Im" in r["ops"] for r in rows)
    assert (tmp_path / "onnx" / "tiny_fold@8.onnx").exists()


def test_build_shard_exports_condconv_once_per_batch(tiny_timm, tmp_path):
    # legacy: no dynamic batch -> batch 1 export, which cannot be re-bound to batch 3 (FixedBatch);
    # dynamo: no dynamic batch either -> one fixed-batch export per batch size
    entry = build_shard("tiny_condconv", 8, (1, 3), str(tmp_path), meta_init=True)
    assert entry["status"] == "ok" and entry["graphs"] == 2, entry
    rows = {r["batch_size"]: r for r in pq.read_table(tmp_path / entry["shard"]).to_pylist()}
    assert "FixedBatch" in entry["fallback_from"] and not entry["failed_batch_sizes"]
    assert rows[3]["exporter"].endswith("fixed batch 3")
    assert rows[3]["macs"] == pytest.approx(3 * rows[1]["macs"], rel=0.01)


def test_both_exporters_failing_reports_both(monkeypatch):
    def fail(*a, dynamo=False, **kw):
        raise (TypeError("\x1b[96mdynamo says no\x1b[0m") if dynamo else RuntimeError("legacy says no"))

    monkeypatch.setattr(zoo, "export_skeleton", fail)
    with pytest.raises(sources.DynamoFailed) as info:
        sources.export("anything", 8, meta_init=False)
    assert str(info.value) == "RuntimeError: legacy says no | dynamo: TypeError: dynamo says no"
