"""The static MLP the GPU predictors blend with their networks, and the blend's weight."""
import numpy as np
import pytest
import torch

from trappm_ray.model.static_mlp import StaticMLP, blend, blend_weight, fit_static_mlp


def _data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)) * [1, 10, 100, 1, 1]
    y = np.exp(0.6 * x[:, 0] + 0.02 * x[:, 1] + rng.normal(size=n) * 0.02) + 1.0
    return x, y


def test_learns_a_log_linear_target_better_than_its_mean():
    x, y = _data()
    tr, va, te = np.arange(160), np.arange(160, 200), np.arange(200, 240)
    model, val_mape = fit_static_mlp(x, y, tr, va, seed=3)
    err = np.mean(np.abs(model.predict(x[te]) / y[te] - 1))
    constant = np.mean(np.abs(np.exp(np.log(y[tr]).mean()) / y[te] - 1))
    assert 0 < val_mape < 100 and err < constant / 3


def test_a_saved_state_dict_is_the_whole_model():
    x, y = _data()
    model, _ = fit_static_mlp(x, y, np.arange(160), np.arange(160, 200), seed=1, max_epochs=30)
    again = StaticMLP(x.shape[1], model.hidden)
    again.load_state_dict(model.state_dict())
    again.eval()
    assert np.allclose(again.predict(x), model.predict(x))
    # float32 static vectors (a Batch's) give the same answers
    assert np.allclose(torch.exp(again(torch.tensor(x, dtype=torch.float32))).detach().numpy(),
                       model.predict(x.astype(np.float32)))


def test_answers_far_outside_the_inputs_stay_within_the_widened_target_range():
    x, y = _data()
    model, _ = fit_static_mlp(x, y, np.arange(160), np.arange(160, 200), seed=1)
    far = model.predict(x[:3] * 1e6)
    assert np.all(np.isfinite(far)) and np.all(far <= y[:160].max() * np.e ** 2 * (1 + 1e-9))


def test_an_input_constant_in_training_does_not_move_the_answer():
    """A flag every training row shares (the device kind when only GPUs trained) tells the net
    nothing: another value of it gives the same answer, not one blown up by a zero spread."""
    x, y = _data()
    x[:, 3] = 0.0
    model, _ = fit_static_mlp(x, y, np.arange(160), np.arange(160, 200), seed=1, max_epochs=30)
    flagged = x[200:].copy()
    flagged[:, 3] = 1.0
    assert np.allclose(model.predict(flagged), model.predict(x[200:]))
    again = StaticMLP(x.shape[1], model.hidden)
    again.load_state_dict(model.state_dict())
    assert np.allclose(again.eval().predict(flagged), model.predict(x[200:]))


def test_blend_weight_follows_the_better_model_on_held_out_rows():
    measured = np.array([2.0, 3.0, 5.0, 8.0])
    assert blend_weight(measured, measured * 1.5, measured) == 1.0
    assert blend_weight(measured * 1.5, measured, measured) == 0.0
    # errors of opposite sign cancel in the middle; equal answers tie, and the tie goes to the GNN
    assert blend_weight(measured * 1.3, measured / 1.3, measured) == 0.5
    assert blend_weight(measured * 1.2, measured * 1.2, measured) == 1.0
    assert blend(measured, measured * 4, 0.5) == pytest.approx(measured * 2)
