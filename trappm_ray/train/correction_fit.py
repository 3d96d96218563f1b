"""Fit a GPU predictor's physics answer and correction bounds from its label rows
(:class:`~trappm_ray.model.correction.CorrectionBounds`): per kernel class, the log factor on the
step model at the median and at a low and a high quantile of measured / step model.

The quantiles are linear in the graph's class shares of GPU time with no intercept (a check-loss
linear program, solved by HiGHS through SciPy), so a class's factor is what the rows made mostly
of that class need. Guards keep a class the rows hardly hold from taking any value the program
likes: a class whose summed share is below :data:`MIN_CLASS_ROWS` rows' worth takes the pooled
quantile, no factor leaves :data:`MAX_SPREAD` around it, and no class's low factor exceeds its
median one nor its high one falls below it (fitted one at a time, the quantiles crossed: the
RTX 3090's depthwise convolutions read low 2.3x, high 1.3x).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog

from trappm_ray import devices
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.correction import FLAG, QUANTILES, SHARE, CorrectionBounds
from trappm_ray.model.launch import step_host_us
from trappm_ray.physics.kernel_classes import device_shares
from trappm_ray.physics.step_model import step_time

MIN_CLASS_ROWS = 5.0
MAX_SPREAD = math.log(4.0)


def quantile_fit(x: np.ndarray, y: np.ndarray, q: float, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Coefficients of the ``q`` quantile of ``y`` linear in ``x`` (no intercept), each within
    ``[lower, upper]``: the check-loss linear program."""
    n, p = x.shape
    cost = np.r_[np.zeros(p), np.full(n, q), np.full(n, 1 - q)]
    eq = np.hstack([x, np.eye(n), -np.eye(n)])
    res = linprog(cost, A_eq=eq, b_eq=y, bounds=[*zip(lower, upper), *[(0, None)] * (2 * n)], method="highs")
    if res.status != 0:
        raise ValueError(f"quantile regression failed: {res.message}")
    return res.x[:p]


def fit_bounds(shares: np.ndarray, ratio: np.ndarray, quantiles: tuple[float, float] = QUANTILES,
               share: float = SHARE, flag: float = FLAG) -> CorrectionBounds:
    """From label rows: ``shares`` ``[rows, classes]`` and ``ratio`` = measured / step model (rows
    without a finite one left out). The median first; each class's low factor is at most its
    median factor, its high one at least."""
    ratio = np.asarray(ratio, np.float64)
    keep = np.isfinite(ratio) & (ratio > 0)  # a graph the step model gives no time has no ratio
    if not keep.any():
        raise ValueError("no label row with a finite ratio to the step model")
    x, y = np.asarray(shares, np.float64)[keep], np.log(ratio[keep])
    rare = x.sum(0) < MIN_CLASS_ROWS

    def fit(q: float, floor: np.ndarray | None = None, ceiling: np.ndarray | None = None) -> np.ndarray:
        pooled = float(np.quantile(y, q))
        lower = np.where(rare, pooled, pooled - MAX_SPREAD)
        upper = np.where(rare, pooled, pooled + MAX_SPREAD)
        if floor is not None:  # a high quantile: never under the median
            lower, upper = np.maximum(lower, floor), np.maximum(upper, floor)
        if ceiling is not None:  # a low quantile: never over the median
            lower, upper = np.minimum(lower, ceiling), np.minimum(upper, ceiling)
        return np.round(quantile_fit(x, y, q, lower, upper), 4)

    mid = fit(0.5)
    low, high = fit(quantiles[0], ceiling=mid), fit(quantiles[1], floor=mid)
    return CorrectionBounds(tuple(map(float, mid)), tuple(map(float, low)), tuple(map(float, high)),
                            share=share, flag=flag, quantiles=quantiles, rows=len(y))


def step_rows(ex: list[dict], index: dict, profiles: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per target of GPU examples (:func:`trappm_ray.train.gpu_examples.examples`), each row's
    class shares and step model (ms, with the host figures of the launch ``profiles``), in the
    examples' order. One graph at a time is held (a device's graphs with their derived values
    would not fit beside the label index)."""
    host = step_host_us(profiles)
    by_graph: dict[tuple, list[int]] = {}
    for i, e in enumerate(ex):
        if e["kind"] != "cpu":
            by_graph.setdefault(tuple(e["rkey"][:3]), []).append(i)
    shares, steps = {}, {}
    for key, rows in by_graph.items():
        graph = row_to_graph(index[key])
        for i in rows:
            precision, mode, optimizer = ex[i]["rkey"][4:7]
            spec = devices.get(ex[i]["spec"])
            shares[i] = device_shares(graph, spec, precision)
            steps[i] = step_time(graph, spec, {"precision": precision, "optimizer": optimizer}, mode, host).total_ms
    out: dict[str, tuple[list, list]] = {}
    for i in sorted(steps):
        s, m = out.setdefault(ex[i]["target"], ([], []))
        s.append(shares[i])
        m.append(steps[i])
    return {t: (np.array(s), np.array(m)) for t, (s, m) in out.items()}


def correction_bounds(ex: list[dict], index: dict, profiles: dict) -> dict[str, dict]:
    """Per target of GPU examples, :func:`fit_bounds` on every row, as stored in a manifest."""
    rows = step_rows(ex, index, profiles)
    measured = {t: np.array([e["measured"] for e in ex if e["kind"] != "cpu" and e["target"] == t]) for t in rows}
    with np.errstate(divide="ignore", invalid="ignore"):
        return {t: fit_bounds(shares, measured[t] / step).to_dict() for t, (shares, step) in sorted(rows.items())
                if np.isfinite(measured[t] / step).any()}


__all__ = ["MIN_CLASS_ROWS", "MAX_SPREAD", "quantile_fit", "fit_bounds", "step_rows", "correction_bounds"]
