"""The unseen-family evaluation's scoring: family-conformal intervals, the shipped answer's hold
and flag, the summary's counts."""
import math

import numpy as np

from trappm_ray.evaluate.unseen import (Answers, candidates, family_conformal, family_out_interval, family_out_quantiles,
                                        per_family, shipped_interval, summary)
from trappm_ray.model.intervals import LEVELS

EXACT = {"levels": list(LEVELS), "values": [0.0] * len(LEVELS)}  # a stored band of no width


def _answers(measured, family, fold, learned, physics, low, high, factor=None) -> Answers:
    n = len(measured)
    learned = np.asarray(learned, float)
    factor = np.ones(n) if factor is None else np.asarray(factor, float)
    return Answers(np.asarray(measured, float), np.asarray(family), np.array([f"a{i}" for i in range(n)]),
                   np.full(n, 64), np.asarray(fold), learned, learned * 0.8, learned * 1.25,
                   np.asarray(physics, float), np.asarray(low, float), np.asarray(high, float), np.zeros(n, bool),
                   factor, factor != 1)


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
    pred, lo, hi, flag = candidates(a, EXACT)["shipped: learned held within the class bounds"]
    assert pred.tolist() == [150.0, 105.0]
    assert flag.tolist() == [True, False]
    assert lo[0] <= 80.0 and hi[0] >= 150.0  # a held answer's interval spans the bounds
    a.layout[1] = True  # near physics, yet out of domain by its layout
    assert candidates(a, EXACT)["shipped: learned held within the class bounds"][3].tolist() == [True, True]


def test_summary_counts_large_errors_and_family_coverage():
    a = _answers([100.0] * 4, ["f", "f", "g", "g"], [0, 0, 1, 1], learned=[100.0, 100.0, 300.0, 100.0],
                 physics=[100.0] * 4, low=[50.0] * 4, high=[400.0] * 4)
    pred = np.array([100.0, 100.0, 300.0, 100.0])
    s = summary(a, pred, pred * 0.9, pred * 1.1, pred > 200)
    assert s["rows_over_50pct"] == 1 and s["rows_over_2x"] == 1
    assert s["flag_recall"] == 100.0 and s["flag_false_alarms"] == 0.0
    assert s["coverage"] == 75.0 and s["families_covered_90"] == 50.0
    assert per_family(a, pred, pred * 0.9, pred * 1.1)[0]["family"] == "g"


def test_family_out_quantiles_keep_the_flagged_answers_apart():
    r = np.r_[np.zeros(90), np.log(np.full(10, 3.0))]  # the flagged tenth stood 3x off
    flag = np.r_[np.zeros(90, bool), np.ones(10, bool)]
    q = family_out_quantiles(r, flag)
    assert q["rows"] == 90 and q["flagged_rows"] == 10
    assert max(map(abs, q["values"])) == 0.0 and min(q["flagged_values"]) == np.log(3.0)


def test_moved_answers_keep_quantiles_of_their_own():
    r = np.r_[np.zeros(80), np.log(np.full(20, 1.5))]  # the moved fifth stood 1.5x off
    moved = np.r_[np.zeros(80, bool), np.ones(20, bool)]
    q = family_out_quantiles(r, np.zeros(100, bool), moved)
    assert q["rows"] == 80 and q["moved_rows"] == 20 and min(q["moved_values"]) == np.log(1.5)
    assert max(map(abs, q["values"])) == 0.0 and "flagged_values" not in q
    a = _answers([100.0, 100.0], ["f", "g"], [0, 1], learned=[100.0, 100.0], physics=[100.0, 100.0],
                 low=[50.0, 50.0], high=[200.0, 200.0], factor=[1.0, 2.0])
    no_flag = np.zeros(2, bool)
    lo, hi = shipped_interval(a, np.array([100.0, 100.0]), no_flag, q)
    assert lo.tolist() == [100.0, 150.0] and hi.tolist() == [100.0, 150.0]


def test_a_flagged_answers_interval_spans_its_own_band_and_the_bounds():
    a = _answers([100.0, 100.0], ["f", "g"], [0, 1], learned=[100.0, 100.0], physics=[100.0, 100.0],
                 low=[90.0, 90.0], high=[110.0, 110.0])
    q = {**EXACT, "flagged_values": [np.log(0.5)] * 8 + [0.0] + [np.log(2.0)] * 8}
    lo, hi = shipped_interval(a, np.array([100.0, 100.0]), np.array([True, False]), q)
    assert lo.tolist() == [50.0, 100.0] and hi.tolist() == [200.0, 100.0]


def test_family_out_interval_bands_each_fold_from_the_other_folds_only():
    # fold 0 (one family) read 2x short, folds 1 and 2 exact: fold 0's band has no room for its own miss
    measured = np.r_[2.0, np.ones(20), np.ones(20)]
    fold = np.r_[0, [1] * 20, [2] * 20]
    n = len(measured)
    a = _answers(measured, fold.astype(str), fold, np.ones(n), np.ones(n), np.ones(n), np.ones(n))
    lo, hi = family_out_interval(a, np.ones(n), np.zeros(n, bool))
    assert hi[0] == 1.0 and hi[1] > 1.0  # fold 1's band holds fold 0's 2x miss (one row of 21)


def test_gnn_folds_keep_each_fold_and_a_rerun_resumes_after_the_kept_ones(monkeypatch):
    from trappm_ray.evaluate import unseen

    fitted = []

    class Stub:  # the GNN's place: ms for the rows asked, counting its fits
        def __init__(self, ex, *args, **kwargs):
            self.ex = ex

        def __call__(self, ex, train, val, idx, seed):
            fitted.append(len(idx))
            return np.array([ex[i]["floor"] * 2 for i in idx])

    monkeypatch.setattr(unseen, "GnnModel", Stub)
    monkeypatch.setattr(unseen, "graph_index", lambda labels, slugs: {})
    ex = [{"family": f, "arch": f"{f}{i}", "floor": 1.0 + i, "measured": 2.0 + 2 * i}
          for f in ("a", "b", "c") for i in range(4)]
    store: dict = {}

    def kept(k, fit):
        if k not in store:
            store[k] = fit()
        return store[k]

    folds = unseen.gnn_folds(ex, [], "labels", 3, 1, kept=kept)
    assert len(folds) == 3 and sorted(store) == [0, 1, 2] and len(fitted) == 3
    assert all(np.allclose(f["pred"], [2 * ex[i]["floor"] for i in f["test"]]) for f in folds)
    del store[2]  # a run stopped during its last fold
    again = unseen.gnn_folds(ex, [], "labels", 3, 1, kept=kept)
    assert len(fitted) == 4 and all(np.array_equal(a["test"], b["test"]) for a, b in zip(folds, again))
