"""The distance of a model to a predictor's training graphs, and what it does to an interval."""
import numpy as np
import pytest

from trappm_ray.model.domain import WIDEN_MAX, assess, fit_domain


def _domain() -> dict:
    rng = np.random.default_rng(0)
    static = np.vstack([rng.normal(0.0, 1.0, (40, 3)), rng.normal(3.0, 1.0, (40, 3))])
    return fit_domain(static, ["a"] * 40 + ["b"] * 40)


def test_a_model_far_from_the_training_graphs_extrapolates_and_widens_the_interval():
    domain = _domain()
    near = assess(domain, np.zeros(3))
    assert not near["extrapolates"] and near["widen"] == 1.0
    far = assess(domain, np.full(3, 40.0))
    assert far["extrapolates"] and "interval widened" in far["note"]
    # widened in proportion to the distance, but never beyond WIDEN_MAX (measured: see its comment)
    assert far["distance"] > 5 * far["threshold"] and far["widen"] == WIDEN_MAX and "the most" in far["note"]
    ratios = []
    for x in np.linspace(4.0, 12.0, 33):
        a = assess(domain, np.full(3, x))
        ratios.append(a["distance"] / a["threshold"])
        assert a["widen"] == pytest.approx(min(max(ratios[-1], 1.0), WIDEN_MAX), rel=1e-3)
    assert any(1.0 < r < WIDEN_MAX for r in ratios) and any(r > WIDEN_MAX for r in ratios)


def test_intervals_calibrated_on_held_out_families_are_not_widened_again():
    far = assess(_domain(), np.full(3, 40.0), held_out_families=True)
    assert far["extrapolates"] and far["widen"] == 1.0
    assert "calibrated on families held out" in far["note"]
