"""The distance of a model to a predictor's training graphs, and what it does to an interval."""
import numpy as np

from trappm_ray.model.domain import assess, fit_domain


def _domain() -> dict:
    rng = np.random.default_rng(0)
    static = np.vstack([rng.normal(0.0, 1.0, (40, 3)), rng.normal(3.0, 1.0, (40, 3))])
    return fit_domain(static, ["a"] * 40 + ["b"] * 40)


def test_a_model_far_from_the_training_graphs_extrapolates_and_widens_the_interval():
    domain = _domain()
    near = assess(domain, np.zeros(3))
    assert not near["extrapolates"] and near["widen"] == 1.0
    far = assess(domain, np.full(3, 40.0))
    assert far["extrapolates"] and far["widen"] > 5 and "interval widened" in far["note"]


def test_intervals_calibrated_on_held_out_families_are_not_widened_again():
    far = assess(_domain(), np.full(3, 40.0), held_out_families=True)
    assert far["extrapolates"] and far["widen"] == 1.0
    assert "calibrated on families held out" in far["note"]
