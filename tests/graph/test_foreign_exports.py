"""Files exported by other tools and settings than the zoo's: torchvision models, the dynamo
exporter, other opsets, weights as graph inputs, a fixed batch dimension."""
import io
import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from trappm_ray import errors  # noqa: E402
from trappm_ray.graph.featurize import featurize  # noqa: E402


def _legacy(model, opset, export_params, dynamic):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), torch.randn(1, 3, 64, 64), buf, dynamo=False,
                          opset_version=opset, export_params=export_params,
                          input_names=["image"],
                          dynamic_axes={"image": {0: "n"}} if dynamic else None)
    return buf.getvalue()


def _dynamo(model, batch):
    logging.disable(logging.WARNING)
    try:
        prog = torch.onnx.export(model.eval(), (torch.randn(batch, 3, 64, 64),), dynamo=True,
                                 dynamic_shapes=({0: torch.export.Dim("batch")},))
    finally:
        logging.disable(logging.NOTSET)
    return prog.model_proto.SerializeToString()


@pytest.mark.parametrize("opset,export_params,dynamic", [
    (11, False, True), (13, False, False), (17, True, True), (13, True, False)])
def test_torchvision_legacy_exports(opset, export_params, dynamic):
    model = torchvision.models.mobilenet_v2(num_classes=10)
    torch_params = sum(p.numel() for p in model.parameters())
    data = _legacy(model, opset, export_params, dynamic)
    g1, g8 = featurize(data, batch_size=1), featurize(data, batch_size=8)
    # BatchNorm folds into Conv in eval exports: each BN's 2*C params become the conv's C bias
    assert 0.97 * torch_params < g1.static["params"] <= torch_params
    assert g8.static["params"] == g1.static["params"]
    assert g8.static["macs"] == pytest.approx(8 * g1.static["macs"], rel=1e-6)
    assert g1.meta["opset"] == opset and g1.meta["unresolved_shapes"] == 0


@pytest.mark.slow
def test_dynamo_export_dynamic_batch():
    data = _dynamo(torchvision.models.vit_b_16(image_size=64, num_classes=10), batch=2)
    g1, g4 = featurize(data, batch_size=1), featurize(data, batch_size=4)
    assert g1.static["params"] > 80e6 and g1.meta["opset"] >= 18
    assert g4.static["macs"] == pytest.approx(4 * g1.static["macs"], rel=1e-3)


@pytest.mark.slow
def test_baked_in_batch_is_refused_not_mispredicted():
    # torch.export specialises a batch of 1, so the attention reshapes keep batch 1
    data = _dynamo(torchvision.models.vit_b_16(image_size=64, num_classes=10), batch=1)
    assert featurize(data, batch_size=1).static["params"] > 80e6
    with pytest.raises(errors.UnsupportedConstruct, match="dynamic batch axis"):
        featurize(data, batch_size=16)
