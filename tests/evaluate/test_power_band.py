"""The power answer's interval: set by the GPU that needed the widest, checked on each GPU left out."""
import numpy as np
import pytest

from trappm_ray.evaluate.power import band, band_checks


def test_the_band_is_the_widest_any_gpu_needed_not_a_pooled_one():
    tight = np.linspace(0.95, 1.05, 1001)  # many rows of a GPU answered well
    low = np.linspace(0.6, 1.0, 101)  # few rows of a GPU the answers read high
    lo, hi = band({"many": tight, "few": low})
    assert lo == pytest.approx(np.quantile(low, 0.05)) and hi == pytest.approx(np.quantile(tight, 0.95))
    pooled = np.quantile(np.r_[tight, low], 0.05)
    assert lo < pooled  # pooled rows would let the few-row GPU's misses fall outside


def test_each_gpu_is_checked_against_the_band_set_without_it():
    checks = band_checks({"a": np.full(50, 1.0), "b": np.full(50, 1.0), "odd": np.full(50, 0.5)})
    assert checks["odd"]["coverage"] == 0.0 and checks["odd"]["band"] == [1.0, 1.0]
    assert checks["a"]["coverage"] == 100.0 and checks["a"]["band"][0] == pytest.approx(0.5)


def test_a_gpu_without_a_checked_row_sets_nothing():
    assert band({"a": np.array([0.9, 1.1]), "none": np.full(1, np.nan)}) == band({"a": np.array([0.9, 1.1])})
    with pytest.raises(ValueError, match="no held-out row"):
        band({"none": np.array([])})
