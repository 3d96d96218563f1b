"""GNN regressors and static baselines on the tiny labeled set: they learn, honour the splits,
and the published recipe runs with its own input handling."""
import numpy as np
import pytest
import torch

from tests.label_builders import SLUG, make_labeled_dir
from trappm_ray.evaluate.baselines import analytic_memory_mb, fit_analytic, fit_mlp, fit_xgboost, static_matrix
from trappm_ray.labels.examples import load_examples
from trappm_ray.model.networks import GraphEncoder
from trappm_ray.model.node_classes import CLASS_KEYS
from trappm_ray.train.regressors import (RECIPES, embed, fit, fit_task, for_target, mape, pack_graphs, prepare,
                                random_encoder, recipe_with, unpack_graphs)
from trappm_ray.train.splits import split


@pytest.fixture(scope="module")
def labeled(tmp_path_factory):
    return make_labeled_dir(str(tmp_path_factory.mktemp("labels")))


@pytest.fixture(scope="module")
def examples(labeled):
    return load_examples(labeled, SLUG)


def test_examples_join_labels_to_graphs(examples):
    assert len(examples) == 54 and len(examples.data) == 54
    assert {r["family"] for r in examples.rows} == {"cnn", "transformer", "wide"}
    assert np.isfinite(examples.column("train_step_ms")).all()
    assert examples.data[0].static.shape == (1, 9)


@pytest.mark.parametrize("batch_affine", [False, True])
def test_gnn_regressor_learns_and_beats_the_mean(examples, batch_affine):
    data = prepare(examples.data)
    y = examples.column("train_step_ms")  # the synthetic memory labels hardly vary
    tr, va, te = split(examples.rows, "random", 1337)
    enc = GraphEncoder(data[0].x.size(1), (16, 8), 0.0)
    recipe = recipe_with("trappm-ray", max_epochs=60, patience=60, hidden=16, fc=32,
                         batch_affine=batch_affine)
    out = fit(data, y, embed(enc, data), tr, va, recipe, 1337)
    res = fit_task(pack_graphs(data), y, embed(enc, data), tr, va, te, recipe, 1337)
    constant = mape(np.full(len(te), np.exp(np.log(y[tr]).mean())), y[te])
    assert out["best_epoch"] >= 1 and out["val_mape"] < 0.5 * constant
    assert len(res["pred"]) == len(te) and mape(res["pred"], y[te]) < 0.5 * constant


def test_packed_graphs_unpack_to_the_same_graphs(examples):
    data = prepare(examples.data[:5])
    packed = pack_graphs(data)
    assert all(isinstance(v, np.ndarray) for v in packed.values())
    back = unpack_graphs(packed)
    assert len(back) == 5
    for a, b in zip(data, back):
        assert a.num_nodes == b.num_nodes and set(a.keys()) == set(b.keys())
        for k in ("x", "agg", "edge_index", "static", "log_samples", *CLASS_KEYS):
            assert torch.equal(a[k], b[k]), k


def test_graphs_without_their_nodes_train_and_predict_as_with_them(examples):
    """The node classes alone (``keep_nodes=False``, 3-5x less memory) give the same fit and
    predictions as the full graphs, packed for Ray or not."""
    full, lean = prepare(examples.data), prepare(examples.data, keep_nodes=False)
    assert "x" not in lean[0] and "edge_index" not in lean[0]
    y = examples.column("train_step_ms")
    tr, va, te = split(examples.rows, "random", 1337)
    recipe = recipe_with("nnlqp", max_epochs=3, hidden=8, fc=8, batch_affine=False)
    a = fit_task(full, y, None, tr, va, te, recipe, 1)
    b = fit_task(pack_graphs(lean), y, None, tr, va, te, recipe, 1)
    assert np.allclose(a["pred"], b["pred"], rtol=1e-4) and a["best_epoch"] == b["best_epoch"]
    with pytest.raises(ValueError, match="needs classes"):
        prepare(examples.data[:1], classes=False, keep_nodes=False)


def test_batch_affine_output_only_for_memory_targets():
    assert for_target(RECIPES["trappm-ray"], "train_memory_mb").batch_affine
    assert not for_target(RECIPES["trappm-ray"], "train_step_ms").batch_affine
    assert not for_target(RECIPES["trappm-published"], "train_memory_mb").batch_affine


def test_published_recipe_runs_on_v1_features(labeled):
    ex = load_examples(labeled, SLUG, "trappm-v1")
    data = prepare(ex.data)
    assert data[0].x.size(1) == 113 and data[0].static.size(1) == 6
    y = ex.column("train_memory_mb")
    tr, va, te = split(ex.rows, "arch", 1337)
    enc = GraphEncoder(113, (8,), 0.0)
    res = fit_task(data, y, embed(enc, data), tr, va, te,
                   recipe_with("trappm-published", max_epochs=3, hidden=8, fc=8), 1)
    assert res["pred"].shape == (len(te),) and res["epochs"] <= 3


def test_random_encoder_matches_shape_not_weights():
    enc = GraphEncoder(12, (16, 8), 0.1)
    rnd = random_encoder(enc, seed=3)
    assert rnd.dims == enc.dims and not rnd.training
    assert not torch.equal(rnd.convs[0].lin_l.weight, enc.convs[0].lin_l.weight)
    assert set(RECIPES) == {"trappm-ray", "trappm-published", "nnlqp", "random-encoder"}


def test_static_baselines_learn(examples):
    data = prepare(examples.data)
    x = static_matrix(data)
    y = examples.column("train_step_ms")
    tr, va, te = split(examples.rows, "random", 1337)
    constant = mape(np.full(len(te), np.exp(np.log(y[tr]).mean())), y[te])
    for f in (fit_mlp, fit_xgboost):
        out = f(x, y, tr, va, 1337)
        assert mape(out["predict"](te), y[te]) < 0.5 * constant, f.__name__


def test_analytic_estimate_round_trips_and_calibrates(examples):
    data = prepare(examples.data)
    x = static_matrix(data)
    est = analytic_memory_mb(x)
    exact = np.array([r for r in (examples.data[i].static[0, 8] for i in range(len(data)))])
    assert est.shape == (len(data),) and (est > 0).all() and len(exact) == len(est)
    y = 3.0 * est
    out = fit_analytic(x, y, np.arange(20), np.arange(20, 30), 0)
    assert out["factor"] == pytest.approx(3.0, rel=1e-4) and out["val_mape"] < 1e-3


def test_epoch_kept_by_training_loss_runs_every_epoch_and_records_the_curve(examples):
    data = prepare(examples.data)
    y = examples.column("train_step_ms")
    tr, va, _ = split(examples.rows, "random", 1337)
    recipe = recipe_with("nnlqp", max_epochs=8, patience=1, hidden=8, fc=8, select="train_loss")
    out = fit(data, y, None, tr, va, recipe, 1)
    losses = [loss for loss, _ in out["history"]]
    assert out["epochs"] == 8 and len(out["history"]) == 8
    assert out["best_epoch"] == 1 + int(np.argmin(losses))
    assert out["val_mape"] == out["history"][out["best_epoch"] - 1][1]
    with pytest.raises(ValueError, match="select"):
        fit(data, y, None, tr, va, recipe_with("nnlqp", max_epochs=1, select="best"), 1)
