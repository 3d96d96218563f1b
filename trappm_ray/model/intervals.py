"""Split-conformal prediction intervals from stored residual quantiles.

A predictor fitted by a device-aware recipe keeps, in its manifest, quantiles of the log
residuals log(measured / predicted) on rows it did not fit (held-out devices for the spec-based
predictor, held-out architectures for the shipped GPU predictors, or whole families held out
where a predictor was calibrated on them: :mod:`trappm_ray.evaluate.unseen`). An interval at any
coverage is then read off those quantiles (split-conformal prediction; Vovk et al., "Algorithmic
Learning in a Random World", 2005): it describes the error on data like the held-out rows, not the
spread of an ensemble. Calibrated on families held out, a target may keep a second set,
``flagged_values``, of the answers its out-of-domain flag raised on (Mondrian conformal: each
group gets the quantiles of its own residuals), which a flagged answer's interval also spans, and
``moved_values``, of the channels-last answers moved from NCHW ones (:mod:`trappm_ray.model.layout`).
"""
from __future__ import annotations

import math

import numpy as np

LEVELS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.16, 0.25, 0.5, 0.75, 0.84, 0.9, 0.95, 0.975, 0.99,
          0.995, 0.9975)


def weighted_quantiles(r: np.ndarray, w: np.ndarray | None = None, levels=LEVELS) -> list[float]:
    """Quantiles of ``r`` at ``levels`` with weights ``w`` (None: equal; midpoint rule on the
    weighted CDF)."""
    r = np.asarray(r, np.float64)
    w = np.ones(len(r)) if w is None else np.asarray(w, np.float64)
    order = np.argsort(r)
    r, w = r[order], w[order]
    cdf = (np.cumsum(w) - 0.5 * w) / w.sum()
    return [float(v) for v in np.interp(levels, cdf, r)]


def quantile_offsets(quantiles: dict, target: str, z: float, group: str = "") -> tuple[float, float]:
    """Log offsets of the central interval with the coverage of ``+-z`` normal sd (1.96: 95%),
    interpolated in a manifest's ``residual_quantiles`` (``quantiles``) of ``target``; of a
    ``group`` (``flagged``: the out-of-domain answers, ``moved``: the moved ones), those of its
    own (:func:`has_group` says whether it keeps them)."""
    q = quantiles[target]
    coverage = math.erf(z / math.sqrt(2))
    levels, values = np.asarray(q["levels"]), np.asarray(q[f"{group}_values" if group else "values"])
    return (float(np.interp((1 - coverage) / 2, levels, values)),
            float(np.interp((1 + coverage) / 2, levels, values)))


def has_group(quantiles: dict, target: str, group: str) -> bool:
    """Whether ``target``'s residual quantiles keep a set of their own for a ``group`` of answers
    (``flagged``, ``moved``)."""
    return f"{group}_values" in quantiles.get(target, {})


__all__ = ["LEVELS", "has_group", "weighted_quantiles", "quantile_offsets"]
