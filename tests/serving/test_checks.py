"""Plain-words flags of impossible answers: ``trappm_ray.serving.checks.absurdities``."""
from __future__ import annotations

from trappm_ray.serving.checks import YEAR_MS, absurdities


def test_costs_no_training_job_has_are_flagged_in_words():
    assert absurdities(10.0, 500.0, 2.0) == []
    assert absurdities(None, None, None) == [] and absurdities(10.0, None, None) == []
    assert "years" in absurdities(3 * YEAR_MS, None)[0]
    assert "cannot be trained as given" in absurdities(1.0, 1e12)[0]


def test_inference_slower_than_a_training_step_is_flagged():
    flags = absurdities(5.0, None, 7.5)
    assert len(flags) == 1 and "slower than a training step" in flags[0] and "7.5 ms" in flags[0]
    assert absurdities(5.0, None, 5.0) == []
