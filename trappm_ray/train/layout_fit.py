"""Fit the NHWC / NCHW factor per layout kind of kernel
(:class:`~trappm_ray.model.layout.LayoutFactors`) on the label rows measured in both layouts.

Each pair (the same graph, batch and setting in NHWC and in NCHW) gives a measured factor; the
model's factor is the graph's :func:`~trappm_ray.physics.kernel_classes.layout_shares` weighted
mean of the kinds' factors, fitted in log space with a soft-L1 loss (a few models whose kernels
the graph does not show, an inplace-ABN net read as plain convolutions, would otherwise drag the
kinds they share) and a small pull of every factor towards 1 (a kind few pairs hold stays near
"no change"). ``band``: the 2.5-97.5% of the measured over the fitted factor with each family's
pairs held out of the fit, the move's own error on families it never saw.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from trappm_ray import devices
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.device_features import SETTING_COLS
from trappm_ray.model.layout import LayoutFactors
from trappm_ray.physics.kernel_classes import LAYOUT_KINDS, layout_shares

PULL = 0.3  # weight of the pull of each log factor towards 0
SCALE = 0.2  # log residual where the soft-L1 loss turns from squared to linear
NHWC = SETTING_COLS.index("nhwc")


def pairs(ex: list[dict]) -> list[tuple[int, int]]:
    """(NHWC example, NCHW example) index pairs of GPU examples with one key and target."""
    nchw = {(e["rkey"], e["target"]): i for i, e in enumerate(ex) if not e["setting"][NHWC]}
    return [(i, nchw[(e["rkey"], e["target"])]) for i, e in enumerate(ex)
            if e["setting"][NHWC] and (e["rkey"], e["target"]) in nchw]


def layout_rows(ex: list[dict], index: dict) -> np.ndarray:
    """Per example its :data:`LAYOUT_KINDS` shares (``[len(ex), kinds]``; CPU rows zero), one
    graph held at a time."""
    out = np.zeros((len(ex), len(LAYOUT_KINDS)))
    by_graph: dict[tuple, list[int]] = {}
    for i, e in enumerate(ex):
        if e["kind"] != "cpu":
            by_graph.setdefault(tuple(e["rkey"][:3]), []).append(i)
    for key, rows in by_graph.items():
        graph = row_to_graph(index[key])
        for i in rows:
            out[i] = layout_shares(graph, devices.get(ex[i]["spec"]), ex[i]["rkey"][4])
    return out


def fit_factors(shares: np.ndarray, log_ratio: np.ndarray) -> np.ndarray:
    """Per kind the factor whose shares-weighted mean best reads ``log_ratio`` (log NHWC / NCHW)."""
    x, y = np.asarray(shares, float), np.asarray(log_ratio, float)

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.r_[np.log(x @ np.exp(theta)) - y, PULL * theta]
    return np.exp(least_squares(residuals, np.zeros(x.shape[1]), loss="soft_l1", f_scale=SCALE).x)


def family_out_log_errors(shares: np.ndarray, log_ratio: np.ndarray, family: np.ndarray) -> np.ndarray:
    """log(measured / fitted factor) per pair, each family's pairs held out of the fit."""
    err = np.empty(len(log_ratio))
    for f in np.unique(family):
        out = family == f
        err[out] = log_ratio[out] - np.log(shares[out] @ fit_factors(shares[~out], log_ratio[~out]))
    return err


def run_key(run: dict) -> tuple[float, float]:
    """The examples' framework-setting key (``rkey[7:]``) of a manifest's ``run`` of one target."""
    return float(run["torch2"]), float(run["compiled"])


def fit_layout(ex: list[dict], shares: np.ndarray, source: str = "", band: bool = True,
               runs: dict[str, tuple[float, float]] | None = None) -> dict[str, LayoutFactors]:
    """Per target with pairs measured in both layouts among the examples ``ex`` (one device's),
    its :class:`LayoutFactors`; ``shares``: :func:`layout_rows` of ``ex``; ``band=False`` skips
    the family-out fits (an evaluation fold's move needs the factors only); ``runs``: per target
    the framework setting (:func:`run_key`) whose pairs alone count, the one the predictor answers
    in (the RTX 3090's inference pairs: 1,201 in PyTorch 2, NHWC 0.79-1.05x NCHW; 290 in PyTorch 1,
    0.75-1.32x)."""
    out = {}
    for target in sorted({e["target"] for e in ex}):
        found = [(i, j) for i, j in pairs(ex) if ex[i]["target"] == target
                 and (runs is None or target not in runs or tuple(ex[i]["rkey"][7:9]) == runs[target])]
        if not found:
            continue
        nhwc, nchw = (np.array(v) for v in zip(*found))
        y = np.log(np.array([ex[i]["measured"] / ex[j]["measured"] for i, j in found]))
        x = shares[nchw]
        family = np.array([ex[i]["family"] for i in nhwc])
        q = (np.quantile(family_out_log_errors(x, y, family), (0.025, 0.975)) if band else (0.0, 0.0))
        out[target] = LayoutFactors(tuple(float(f) for f in fit_factors(x, y)), (float(q[0]), float(q[1])),
                                    len(found), len(set(family)), source)
    return out


__all__ = ["PULL", "SCALE", "run_key", "pairs", "layout_rows", "fit_factors", "family_out_log_errors", "fit_layout"]
