"""How far a model is from what a predictor was trained on (out-of-distribution awareness).

A model a user brings is new by definition; what matters is whether it resembles the training
graphs. The measure is the distance from the model's graph-level features (the v2 static vector:
batch size, resolution, nodes, edges, MACs, parameters, weight, activation and training-memory
bytes, all log-scaled) to the nearest training graph, in units of each feature's spread. Its
threshold is calibrated on held-out families: for every training graph, the distance to the
nearest graph of *another* family, i.e. how far a whole unseen family typically sits; beyond the
95th percentile of that, a prediction extrapolates, is flagged, and its interval is widened in
proportion, up to :data:`WIDEN_MAX`.
"""
from __future__ import annotations

import numpy as np

QUANTILE = 0.95
# The most an interval is widened, however far the model: beyond it a band raised to the distance
# ratio read millions of ms (a synthetic residual chain at 13.9x: [26, 10.6 million] ms around
# 58 ms). Two measurements put the need at about 2x: on the H200 campaign's rows (no predictor
# saw that GPU) the spec-based bands held 97% (training) and 93% (inference) of the 466 flagged
# answers unwidened and 100% / 97% widened by their ratios (at most 1.99x;
# experiments/interval_widening.py), and the RTX 3090's bands calibrated on families held out
# are 1.9x as wide in log space for flagged answers as for the others (docs/results-unseen.md).
WIDEN_MAX = 2.0
MAX_REFERENCE = 4000  # graphs kept in the manifest (a seeded sample of larger sets)


def _nearest(points: np.ndarray, refs: np.ndarray, chunk: int = 512) -> np.ndarray:
    out = np.empty(len(points))
    for i in range(0, len(points), chunk):
        d = ((points[i:i + chunk, None, :] - refs[None, :, :]) ** 2).sum(-1)
        out[i:i + chunk] = np.sqrt(d.min(1))
    return out


def fit_domain(static: np.ndarray, families: list[str], seed: int = 0) -> dict:
    """The training domain of a predictor, as stored in its manifest.

    Args:
        static: ``[N, D]`` static feature vectors of the training graphs.
        families: the family of each graph (the calibration holds each family out in turn).
        seed: sampling seed when there are more than ``MAX_REFERENCE`` graphs.

    Returns:
        ``{"mean", "std", "reference" (scaled vectors), "threshold", "quantile"}`` (JSON types).
    """
    static = np.asarray(static, np.float64)
    mean, std = static.mean(0), np.maximum(static.std(0), 1e-3)
    scaled = (static - mean) / std
    fam = np.asarray(families)
    held_out = np.full(len(scaled), np.inf)
    for f in np.unique(fam):
        inside, outside = fam == f, fam != f
        if outside.any():
            held_out[inside] = _nearest(scaled[inside], scaled[outside])
    finite = held_out[np.isfinite(held_out)]
    threshold = float(np.quantile(finite, QUANTILE)) if len(finite) else 1.0
    keep = np.arange(len(scaled))
    if len(keep) > MAX_REFERENCE:
        keep = np.sort(np.random.default_rng(seed).choice(len(keep), MAX_REFERENCE, replace=False))
    return {"mean": mean.round(6).tolist(), "std": std.round(6).tolist(),
            "reference": scaled[keep].round(4).tolist(), "threshold": max(threshold, 1e-3),
            "quantile": QUANTILE}


_ARRAYS: dict[int, tuple] = {}  # id(reference list) -> (the list, its arrays): one parse per manifest


def _arrays(domain: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The domain's mean, spread and reference graphs as arrays, parsed once per manifest (up to
    4,000 graphs: parsing the JSON lists took longer than the distances)."""
    ref = domain["reference"]
    kept = _ARRAYS.get(id(ref))
    if kept is None or kept[0] is not ref:  # the list itself is kept, so its id is not reused
        if len(_ARRAYS) >= 16:  # a process serves a few predictors; tests load many
            _ARRAYS.clear()
        kept = _ARRAYS[id(ref)] = (ref, np.asarray(domain["mean"], np.float64),
                                   np.asarray(domain["std"], np.float64), np.asarray(ref, np.float64))
    return kept[1], kept[2], kept[3]


def assess(domain: dict | None, static: np.ndarray, held_out_families: bool = False) -> dict:
    """Distance of one model's static vector to the training domain, and whether it extrapolates.

    Args:
        domain: the manifest's training domain (:func:`fit_domain`).
        static: the model's static feature vector.
        held_out_families: the predictor's intervals were calibrated on whole families held out
            (:mod:`trappm_ray.evaluate.unseen`), so they already hold what an unseen family
            costs: the distance is reported, the interval not widened by it (it would count
            that twice, uncalibrated: a batch-1 ResNet at 64 px read [1, 4455] ms).

    Returns:
        ``{"distance", "threshold", "extrapolates", "widen", "note"}``; with no domain (an older
        predictor) only a note saying so. ``widen`` multiplies the interval half-width.
    """
    if not domain:
        return {"distance": None, "threshold": None, "extrapolates": None, "widen": 1.0,
                "note": "this predictor records no training domain; similarity not assessed"}
    mean, std, reference = _arrays(domain)
    scaled = (np.asarray(static, np.float64) - mean) / std
    distance = float(_nearest(scaled[None, :], reference)[0])
    ratio = distance / domain["threshold"]
    out = {"distance": round(distance, 3), "threshold": round(domain["threshold"], 3),
           "extrapolates": bool(ratio > 1.0),
           "widen": 1.0 if held_out_families else float(min(max(1.0, ratio), WIDEN_MAX))}
    out["note"] = (f"unlike the graphs this predictor was trained on (distance {distance:.1f}, "
                   f"{ratio:.2f}x what a held-out family typically is): an extrapolation, "
                   + ("its interval calibrated on families held out" if held_out_families
                      else f"interval widened {out['widen']:.2f}x" + (" (the most it is widened)" if ratio > WIDEN_MAX else ""))
                   if out["extrapolates"]
                   else "within the range of the training graphs")
    return out


__all__ = ["QUANTILE", "WIDEN_MAX", "fit_domain", "assess"]
