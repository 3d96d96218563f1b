"""The GPU evaluation's models, clamping, intervals and metrics on synthetic examples."""
from __future__ import annotations

import numpy as np
import torch
import pytest

from trappm_ray.evaluate.gpu import evaluate_lodo, evaluate_task, fit_predict, floor_check
from trappm_ray.evaluate.gpu_report import markdown
from trappm_ray.evaluate.gpu import GpuEvalConfig
from trappm_ray.model.static_mlp import GNN_SHARE

FAMILIES = ("resnet", "vit", "convnext", "mobilenet")


def synthetic(spec: str = "rtx3090", efficiency: float = 2.0, n_arch: int = 6, seed: int = 0) -> list[dict]:
    """Rows whose measured time is ``efficiency`` x the floor, with a little noise."""
    rng = np.random.default_rng(seed)
    out = []
    for fam in FAMILIES:
        for a in range(n_arch):
            for b in (32, 64, 128):
                floor = float(b * (a + 1))
                out.append({"slug": f"{spec}-amp", "spec": spec, "kind": "cuda", "target": "inference_ms",
                            "arch": f"{fam}{a}", "family": fam, "floor": floor,
                            "measured": floor * efficiency * float(np.exp(rng.normal(0, 0.02))),
                            "x": np.array([np.log(floor), a, b / 128, efficiency])})
    return out


def test_roofline_efficiency_learns_the_device_factor():
    ex = synthetic()
    idx = np.arange(len(ex))
    train, val, test = idx[::3], idx[1::3], idx[2::3]
    out = fit_predict(ex, train, val, test, "roofline-eff", 0)
    meas = np.array([ex[i]["measured"] for i in test])
    assert np.mean(np.abs(out["pred"] / meas - 1)) < 0.05
    floor = fit_predict(ex, train, val, test, "roofline", 0)
    assert floor["pred"] == pytest.approx([ex[i]["floor"] for i in test])
    assert np.mean((meas >= out["lo"]) & (meas <= out["hi"])) > 0.8


def test_predictions_are_clamped_to_the_floor():
    ex = synthetic(efficiency=0.5)  # measurements below the floor: the fitted factor is 0.5
    idx = np.arange(len(ex))
    out = fit_predict(ex, idx[::2], idx[1::4], idx[3::4], "roofline-eff", 0)
    floor = np.array([ex[i]["floor"] for i in idx[3::4]])
    assert np.all(out["raw"] < floor)
    assert out["pred"] == pytest.approx(floor)
    assert np.all(out["lo"] >= floor - 1e-9)


def test_splits_and_lodo_report_every_model():
    cfg = GpuEvalConfig(seeds=(1337,), models=("roofline", "roofline-eff", "xgboost"))
    ex = synthetic()
    res = evaluate_task(ex, cfg)
    assert set(res) == {"random", "arch", "family"}
    fam = res["family"]["roofline-eff"]
    assert fam["folds"] == len(FAMILIES) and fam["n_test"] == len(ex)
    assert fam["pred_below_floor"] == 0.0 and fam["mape"] < 5
    assert res["random"]["roofline"]["mape"] == pytest.approx(50, abs=2)  # floor = half the time
    lodo = evaluate_lodo(ex + synthetic("rtx4090", efficiency=3.0, seed=1), cfg)
    assert set(lodo) == {"rtx3090", "rtx4090"}
    # an unseen device gets the other GPU's efficiency: 2 instead of 3
    assert lodo["rtx4090"]["roofline-eff"]["mape"] == pytest.approx(100 / 3, abs=2)
    report = {"meta": {"created": "now", "wall_s": 0, "rows": {}}, "floor_check": floor_check(ex),
              "tasks": {"rtx3090-amp/inference_ms": {"rows": len(ex), "architectures": 24, "families": 4,
                                                      "measured_below_floor": 0.0, "splits": res}},
              "lodo_inference": {"rows": 2 * len(ex), "devices": lodo}}
    text = markdown(report)
    assert "### split: family" in text and "held out: rtx4090" in text
    assert floor_check(ex)["rtx3090-amp/inference_ms"]["below"] == 0


def _tiny_gnn_examples():
    from tests import onnx_builders as ob
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.graph.rows import graph_to_row

    index, ex = {}, []
    for a, hw in enumerate((8, 12, 16, 20)):
        for b in (2, 4, 8):
            arch = f"cnn{a}"
            index[(arch, hw, b)] = graph_to_row(featurize(ob.cnn_model(hw=hw), batch_size=b), arch=arch)
            floor = 0.01 * b * hw
            ex.append({"arch": arch, "family": "cnn", "floor": floor, "measured": (2 + 0.1 * b + 0.01 * hw) * floor,
                       "rkey": (arch, hw, b, "rtx3090", "amp-fp16", "train", "sgd-momentum", 0.0, 0.0),
                       "x": np.array([np.log(floor), b, hw], float)})
    return ex, index


def test_gnn_variant_predicts_milliseconds_on_tiny_graphs(ray_session):
    from trappm_ray.evaluate.gpu_gnn import GnnModel

    ex, index = _tiny_gnn_examples()
    run = GnnModel(ex, index, max_epochs=2, seeds=2)
    idx = np.arange(len(ex))
    out = run(ex, idx[::2], idx[1::2], idx, 0)
    assert out.shape == (len(ex),) and np.all(np.isfinite(out)) and np.all(out > 0)
    # prefitted splits (one Ray fan-out) answer the same calls with the same seeded networks
    run.prefit([(idx[::2], idx[1::2], idx, 0), (idx[1::2], idx[::2], idx[::2], 1)])
    assert np.allclose(run(ex, idx[::2], idx[1::2], idx, 0), out)
    assert run(ex, idx[1::2], idx[::2], idx[::2], 1).shape == (len(idx[::2]),)
    # the networks alone (the ablation row) from the same fit, after which nothing is held
    alone = run.alone(ex, idx[1::2], idx[::2], idx[::2], 1)
    assert alone.shape == (len(idx[::2]),) and np.all(alone > 0)
    assert run.alone(ex, idx[::2], idx[1::2], idx, 0).shape == out.shape
    # the blend with the share chosen on the validation rows, from the same fit
    chosen = run.val_share(ex, idx[1::2], idx[::2], idx[::2], 1)
    assert chosen.shape == alone.shape and np.all(chosen > 0)
    run.val_share(ex, idx[::2], idx[1::2], idx, 0)
    assert not run.done and run.share == GNN_SHARE
    assert [label for label, _ in run.weights] == ["", "", ""] and all(0 <= w <= 1 for _, w in run.weights)


def test_gnn_at_share_one_is_the_networks_alone(ray_session):
    from trappm_ray.evaluate.gpu_gnn import GnnModel

    ex, index = _tiny_gnn_examples()
    run = GnnModel(ex, index, max_epochs=2, seeds=1, share=1.0)
    idx = np.arange(len(ex))
    assert np.allclose(run(ex, idx[::2], idx[1::2], idx, 0), run.alone(ex, idx[::2], idx[1::2], idx, 0))


def test_gnn_reading_a_pretrained_encoder_embeds_each_graph_once_and_answers(ray_session):
    from trappm_ray.evaluate.gpu_gnn import GnnModel
    from trappm_ray.train.gpu_predictor import graph_embeddings
    from trappm_ray.graph import features
    from trappm_ray.model.networks import GraphEncoder

    ex, index = _tiny_gnn_examples()
    torch.manual_seed(0)
    encoder = GraphEncoder(features.get("v2").node_dim, (16, 8), 0.0).eval()
    emb = graph_embeddings(encoder, ex + ex[:3], index)
    assert emb.shape == (len(ex) + 3, 8) and torch.equal(emb[0], emb[len(ex)])  # same graph, same row
    assert not torch.equal(emb[0], emb[1])  # another batch size, another graph
    assert torch.allclose(graph_embeddings(encoder, ex, index, chunk=1), emb[:len(ex)])  # built a chunk at a time
    run = GnnModel(ex, index, max_epochs=2, seeds=1, encoder=encoder)
    assert run.recipe.embedding == "pretrained"
    idx = np.arange(len(ex))
    out = run(ex, idx[::2], idx[1::2], idx, 0)
    assert out.shape == (len(ex),) and np.all(np.isfinite(out)) and np.all(out > 0)


def test_gnn_auxiliary_rows_of_held_architectures_stay_out():
    """The other target's rows join the training rows, except those of an architecture that is
    validated or tested on."""
    from trappm_ray.evaluate.gpu_gnn import GnnModel

    ex, index = _tiny_gnn_examples()
    aux = [dict(e, measured=e["measured"] / 3) for e in ex]
    run = GnnModel(ex, index, max_epochs=1, seeds=1, auxiliary=aux)
    cnn0 = np.array([i for i, e in enumerate(ex) if e["arch"] == "cnn0"])
    rest = np.array([i for i, e in enumerate(ex) if e["arch"] != "cnn0"])
    train = run.training_rows(rest[:3], rest[3:], cnn0)
    added = sorted(int(i) - len(ex) for i in train if i >= len(ex))
    assert added == [i for i, e in enumerate(aux) if e["arch"] not in {ex[j]["arch"] for j in np.r_[rest[3:], cnn0]}]
    assert all(aux[i]["arch"] != "cnn0" for i in added) and added


def test_lodo_scores_the_rows_in_settings_other_devices_share():
    """The 4090's torch.compile rows: no other GPU ran compiled, so they are also left out once."""
    a, b = synthetic("rtx3090"), synthetic("rtx4090", efficiency=3.0, seed=1)
    for e in a:
        e["setting"] = (0.0,)
    for i, e in enumerate(b):
        e["setting"] = (float(i % 2),)  # half of the 4090 rows compiled
    lodo = evaluate_lodo(a + b, GpuEvalConfig(models=("roofline", "roofline-eff")))
    assert set(lodo) == {"rtx3090", "rtx4090", "rtx4090 (settings seen)"}
    assert lodo["rtx4090 (settings seen)"]["roofline"]["n_test"] == len(b) // 2
    assert lodo["rtx4090"]["roofline"]["n_test"] == len(b)


def test_ensembles_average_the_members_near_their_median_and_take_the_median_in_log_space():
    from trappm_ray.evaluate.gpu import ensemble

    ex = [{"measured": 4.0, "floor": 1.0} for _ in range(4)]
    val, test = np.array([0, 1]), np.array([2, 3])
    fits = {m: {"val_raw": np.array([v, v]), "raw": np.array([v, v])}
            for m, v in (("xgboost", 2.5), ("mlp", 4.0), ("gnn", 400.0), ("roofline", 1.0))}
    out = ensemble(ex, val, test, fits)  # roofline is no member; gnn is 100x off the median: left out
    assert out["ensemble"]["pred"] == pytest.approx([10 ** (1 / 2)] * 2)  # (2.5 x 4)^(1/2)
    assert out["ensemble-median"]["pred"] == pytest.approx([4.0, 4.0])
    fits["gnn"] = {"val_raw": np.array([7.0, 7.0]), "raw": np.array([7.0, 700.0])}  # within 2x of 4: kept
    out = ensemble(ex, val, test, fits)
    assert out["ensemble"]["pred"] == pytest.approx([70 ** (1 / 3), 10 ** (1 / 2)])
    assert ensemble(ex, val, test, {"xgboost": fits["xgboost"]}) == {}
