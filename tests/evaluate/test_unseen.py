"""The unseen-family evaluation's scoring: family-conformal intervals, the shipped answer's hold
and flag, the summary's counts."""
import math

import numpy as np

from trappm_ray.evaluate.unseen import Answers, candidates, family_conformal, per_family, summary


def _answers(measured, family, fold, learned, physics, low, high) -> Answers:
    n = len(measured)
    learned = np.asarray(learned, float)
    return Answers(np.asarray(measured, float), np.asarray(family), np.array([f"a{i}" for i in range(n)]),
                   np.full(n, 64), np.asarray(fold), learned, learned * 0.8, learned * 1.25,
                   np.asarray(physics, float), np.asarray(low, float), np.asarray(high, float))


def test_family_conformal_reads_only_the_other_folds_with_families_weighted_alike():
    # fold 0: a family of one row read 2x short; fold 1: a family of 39 rows read exactly; fold 2: one exact row
    measured = np.r_[2.0, np.ones(39), 1.0]
    family = np.r_[["odd"], ["big"] * 39, ["small"]]
    fold = np.r_[0, [1] * 39, 2]
    n = len(measured)
    a = _answers(measured, family, fold, np.ones(n), np.ones(n), np.ones(n), np.ones(n))
    lo, hi = family_conformal(a, np.ones(n))
    # fold 0's interval comes from folds 1 and 2 (all exact): no room for its own 2x miss
    assert math.isclose(lo[0], 1.0) and math.isclose(hi[0], 1.0)
    # fold 2's: "odd" weighs as much as "big" with its 39 rows, so the upper end is the 2x miss
    # (rows weighted alike would put it near 1.4x)
    assert math.isclose(hi[-1], 2.0)


def test_shipped_answer_is_held_within_the_bounds_and_flagged():
    a = _answers([100.0, 100.0], ["f", "g"], [0, 1], learned=[400.0, 105.0], physics=[100.0, 100.0],
                 low=[80.0, 80.0], high=[150.0, 150.0])
    pred, lo, hi, flag = candidates(a)["shipped: learned held within the class bounds"]
    assert pred.tolist() == [150.0, 105.0]
    assert flag.tolist() == [True, False]
    assert lo[0] <= 80.0 and hi[0] >= 150.0  # a held answer's interval spans the bounds


def test_summary_counts_large_errors_and_family_coverage():
    a = _answers([100.0] * 4, ["f", "f", "g", "g"], [0, 0, 1, 1], learned=[100.0, 100.0, 300.0, 100.0],
                 physics=[100.0] * 4, low=[50.0] * 4, high=[400.0] * 4)
    pred = np.array([100.0, 100.0, 300.0, 100.0])
    s = summary(a, pred, pred * 0.9, pred * 1.1, pred > 200)
    assert s["rows_over_50pct"] == 1 and s["rows_over_2x"] == 1
    assert s["flag_recall"] == 100.0 and s["flag_false_alarms"] == 0.0
    assert s["coverage"] == 75.0 and s["families_covered_90"] == 50.0
    assert per_family(a, pred, pred * 0.9, pred * 1.1)[0]["family"] == "g"
