"""The shipped GPU predictor's training job on a tiny labeled GPU set: it registers a predictor
fed roofline inputs whose answers respect the floor and carry a conformal band."""
from pathlib import Path

import pytest

from tests.label_builders import make_labeled_dir
from tests.onnx_builders import cnn_model, transformer_block
from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model import predictor as P
from trappm_ray.model.anchors import MeasuredAnchors
from trappm_ray.model.device_features import static_input
from trappm_ray.model.network_predictor import NetworkPredictor
from trappm_ray.model.correction import CorrectionBounds
from trappm_ray.model.stored import rewrite_manifest
from trappm_ray.train.build_predictor import ship
from trappm_ray.train.gpu_predictor import GpuPredictorConfig, LabelsOfPredictor, run_setting, train_gpu_predictor, write_correction

GPU = {"device_spec": "rtx3090", "precision": "amp-fp16", "optimizer": "sgd-momentum", "memory_format": "nchw",
       "compiled": "none", "gpus": 1, "torch_version": "1.12;2.1.0"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ray_session):
    root = tmp_path_factory.mktemp("gpu-predictor")
    labels = make_labeled_dir(str(root / "labels"), slug="test-gpu-amp", device="cuda", extra=GPU)
    cfg = GpuPredictorConfig(labels=labels, device="test-gpu-amp", seeds=(1, 2), max_epochs=3,
                             registry=str(root / "registry"))
    return train_gpu_predictor(cfg)


def test_registers_a_roofline_predictor_with_its_provenance(trained):
    assert trained["uri"].endswith("test-gpu-amp/v0001")
    assert set(trained["task_seconds"]) == {f"{t}/{s}" for t in ("train_step_ms", "inference_ms") for s in (1, 2)}
    m = P.Predictor.load(trained["uri"]).manifest
    assert m.net.inputs == "roofline" and m.device.spec == "rtx3090"
    # the networks read the shipped CPU predictor's pretrained encoder too (TraPPM's recipe)
    assert m.net.encoder["source"] == "trappm_ray/predictors/default" and m.recipe["embedding"] == "pretrained"
    assert m.net.encoder["in_dim"] == P.Predictor.load(P.DEFAULT_DIR).manifest.net.encoder["in_dim"]
    assert m.options["precision"] == ["amp-fp16"] and m.data["per_target"]["train_step_ms"] == 54
    assert m.net.run["train_step_ms"] == {"torch2": 1, "compiled": 0}
    q = m.residual_quantiles["train_step_ms"]
    assert q["rows"] > 0 and q["values"] == sorted(q["values"])


def test_predictions_respect_the_floor_and_carry_a_band(trained):
    pred = P.Predictor.load(trained["uri"])
    graphs = [featurize(cnn_model(), batch_size=4), featurize(transformer_block(), batch_size=2)]
    setting = {"precision": "amp-fp16", "optimizer": "sgd-momentum", "memory_format": "nchw", "interval_z": 1.96}
    rows = pred.predict_graphs(graphs, [setting] * 2)
    spec = devices.get("rtx3090")
    for graph, row in zip(graphs, rows):
        for target, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
            floor = static_input(graph, spec, setting, mode, pred.manifest.net.run[target])[0]
            assert row[f"{target}_floor"] == pytest.approx(floor)
            assert floor <= row[f"{target}_low"] <= row[target] <= row[f"{target}_high"]
    # serving's NumPy forward (the encoder on the graphs' v2 features, the heads on the roofline
    # inputs) answers as the PyTorch networks do
    served = NetworkPredictor.load(trained["uri"]).predict_graphs(graphs, [setting] * 2)
    for a, b in zip(served, rows):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-5) for k in b)
    # the same graphs without settings: the manifest's defaults, the same answer
    again = pred.predict_graphs(graphs)
    assert again[0]["train_step_ms"] == pytest.approx(rows[0]["train_step_ms"])
    # a wider z widens the band
    wide = pred.predict_graphs(graphs[:1], [{**setting, "interval_z": 3.0}])[0]
    assert wide["train_step_ms_high"] >= rows[0]["train_step_ms_high"]


def test_answers_blend_each_network_with_its_static_mlp(trained):
    import numpy as np
    import torch
    from torch_geometric.data import Batch

    from trappm_ray.graph.arrays import graph_arrays
    from trappm_ray.graph.data import to_data
    from trappm_ray.model.roofline_inputs import node_arrays
    from trappm_ray.model.static_mlp import GNN_SHARE

    pred = P.Predictor.load(trained["uri"])
    blend = pred.manifest.net.blend
    assert blend["weights"] == {t: GNN_SHARE for t in pred.targets} and "fixed" in blend["rule"]
    assert trained["gnn_share"] == blend["weights"] and len(pred.mlps["train_step_ms"]) == 2
    graph, spec = featurize(cnn_model(), batch_size=4), devices.get("rtx3090")
    setting = {"precision": "amp-fp16", "optimizer": "sgd-momentum", "memory_format": "nchw"}
    arrays = [node_arrays(graph, spec, "amp-fp16", True, False).with_static(
        static_input(graph, spec, setting, "train", pred.manifest.net.run["train_step_ms"])[1])]
    encoded = [graph_arrays(graph, "v2")]  # what the encoder reads
    both = pred.predict_arrays(arrays, ["train_step_ms"], encoded)["train_step_ms"]
    alone = P.Predictor(pred.manifest, pred.encoder, pred.heads, pred.scalers).predict_arrays(
        arrays, ["train_step_ms"], encoded)["train_step_ms"]
    static = Batch.from_data_list([to_data(a) for a in arrays]).static
    with torch.no_grad():
        mlp = np.stack([torch.exp(m(static)).numpy() for m in pred.mlps["train_step_ms"]], 1)
    w = blend["weights"]["train_step_ms"]
    assert both == pytest.approx(np.exp(w * np.log(alone) + (1 - w) * np.log(mlp)), rel=1e-5)


def test_share_one_keeps_the_networks_alone(tmp_path, ray_session):
    labels = make_labeled_dir(str(tmp_path / "labels"), slug="test-gpu-amp", device="cuda", extra=GPU)
    out = train_gpu_predictor(GpuPredictorConfig(labels=labels, device="test-gpu-amp", seeds=(1,), max_epochs=2,
                                                 targets=("inference_ms",), gnn_share=1.0, registry=str(tmp_path / "reg")))
    pred = P.Predictor.load(out["uri"])
    assert pred.manifest.net.blend is None and not pred.mlps and out["gnn_share"] == {}
    assert out["held_out_arch_mape"] == pytest.approx(out["networks_alone"])


def test_run_setting_prefers_pytorch_2_and_eager():
    ex = [{"setting": (1.0, 0.0, c, t, 1.0, 0.0)} for c, t in ((0.0, 0.0), (1.0, 1.0))]
    assert run_setting(ex) == {"torch2": 1, "compiled": 0}
    assert run_setting(ex[:1]) == {"torch2": 0, "compiled": 0}


def test_ship_copies_a_validated_predictor(trained, tmp_path):
    dest = ship(trained["uri"], tmp_path / "test-gpu-amp")
    assert P.Predictor.load(dest).manifest.net.weights_sha256 == P.Predictor.load(trained["uri"]).manifest.net.weights_sha256
    assert len(MeasuredAnchors.load(dest)) == trained["anchors"]


def test_stores_the_measurements_by_graph_beside_the_networks(trained):
    anchors = MeasuredAnchors.load(trained["uri"])
    assert len(anchors) == trained["anchors"] > 0 and anchors.device == "test-gpu-amp"
    rows = [r for by_batch in anchors.by_key.values() for r in by_batch.values()]
    assert {r["target"] for r in rows} == {"train_step_ms", "inference_ms"}
    assert all(r["ratio"] > 0 and r["measured_ms"] > 0 for r in rows)


def test_stores_the_physics_answer_and_bounds_by_kernel_class(trained, tmp_path):
    m = P.Predictor.load(trained["uri"]).manifest
    assert set(m.correction) == {"train_step_ms", "inference_ms"}
    for d in m.correction.values():
        bounds = CorrectionBounds.from_dict(d)
        assert bounds.rows > 0 and all(lo <= hi for lo, hi in zip(bounds.low, bounds.high))
    dest = ship(trained["uri"], tmp_path / "rewritten")
    rewrite_manifest(str(dest), m.replace(correction={}, launch={}))
    labels = str(Path(trained["uri"]).parents[2] / "labels")
    out = write_correction(LabelsOfPredictor(uri=str(dest), labels=labels, device="test-gpu-amp"))
    again = P.Predictor.load(dest).manifest  # the weights' hash still holds
    assert again.correction == m.correction == out["correction"]
    assert again.launch == m.launch == out["launch"] and m.launch  # the host's time per kernel too


def test_auxiliary_rows_never_include_a_held_architecture():
    from trappm_ray.train.gpu_predictor import auxiliary_rows

    aux = [{"arch": a} for a in ("a", "b", "a", "c")]
    assert auxiliary_rows(aux, {"a"}).tolist() == [1, 3]
    assert auxiliary_rows(aux, set()).tolist() == [0, 1, 2, 3]
    assert auxiliary_rows([], {"a"}).tolist() == []
