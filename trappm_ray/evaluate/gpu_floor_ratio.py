"""Reference transfer: an unseen device's time from a labeled device's, scaled by their roofline floors.

For a device with no labels, predict the graph's time on a *reference* device that has labels (a
regressor fitted on that device's rows alone), then move it as the product does
(:func:`trappm_ray.model.floor_ratio.transfer_ms`: times ``floor(target) / floor(reference)``, the ratio
of the two devices' roofline floors for the same graph and run settings, never below the host's
kernel-launch time). Whatever the reference's regressor learned about overheads
the roofline does not model (launches, framework, fusion) carries over; what differs between the
devices is taken from their specs through the floor. Measured on timm's inference rows with the
reference's *measured* times (pairs of the same architecture, resolution and batch): RTX 4090 from
RTX 3090 12.6% MAPE, RTX 3090 from RTX 4090 10.7%.

In :func:`transfer_predict` the reference's times are predictions, cross-fitted by architecture:
a test row's architecture is never among the reference rows its regressor was fitted on, so the
score is for a model unseen on any device and a device without labels.
"""
from __future__ import annotations

import math

import numpy as np

from trappm_ray import devices
from trappm_ray.evaluate.baselines import fit_xgboost
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.device_features import KERNELS_COL, SETTING_COLS, feature_vector, roofline_features
from trappm_ray.model.anchors import nearest_batch
from trappm_ray.model.floor_ratio import transfer_ms

FOLDS = 5


def reference_device(ex: list[dict], held: str, rest: np.ndarray) -> str | None:
    """The training device of ``held``'s kind with the most rows (None: no such device)."""
    kind = next(e["kind"] for e in ex if e["spec"] == held)
    counts: dict[str, int] = {}
    for i in rest:
        if ex[i]["kind"] == kind:
            counts[ex[i]["spec"]] = counts.get(ex[i]["spec"], 0) + 1
    return max(sorted(counts), key=counts.get) if counts else None


def on_device(e: dict, spec: devices.DeviceSpec, index: dict, cache: dict) -> tuple[float, np.ndarray] | None:
    """(floor, feature vector) of example ``e``'s graph and run settings on device ``spec``."""
    arch, res, batch, _, precision, mode, optimizer, _, _ = e["rkey"]
    key = (e["rkey"], spec.slug)
    if key not in cache:
        setting = dict(zip(SETTING_COLS, e["setting"]))
        roof = roofline_features(row_to_graph(index[(arch, res, batch)]), spec, precision, mode, optimizer, setting)
        cache[key] = None if roof is None else (roof[0], feature_vector(roof[1], spec, setting))
    return cache[key]


def reference_fitter(model: str, on_ref: list[dict], y: np.ndarray, index: dict, seed: int,
                     max_epochs: int = 60):
    """``fit(train, val) -> predict(idx)`` over examples as they run on the reference device
    (``on_ref``: ``rkey`` naming it, device-aware vector ``x``; targets ``y`` = measured / floor)
    for the reference regressor: ``xgboost`` on the vectors, or ``gnn``, the shipped GPU
    predictors' recipe (:mod:`trappm_ray.train.gpu_predictor`) on their graphs."""
    if model == "xgboost":
        x = np.stack([e["x"] for e in on_ref]).astype(np.float64)
        return lambda train, val: fit_xgboost(x, y, train, val, seed)["predict"]
    from trappm_ray.train.gpu_predictor import gnn_inputs, gnn_recipe  # torch_geometric only when asked
    from trappm_ray.train.regressors import fit, predict_rows

    data = gnn_inputs(on_ref, index)
    recipe = gnn_recipe(max_epochs)

    def fit_gnn(train, val):
        out = fit(data, y, None, train, val, recipe, seed)
        return lambda idx: predict_rows(out["model"], out["scaler"], data, None, idx)
    return fit_gnn


def transfer_predict(ex: list[dict], held: str, rest: np.ndarray, test: np.ndarray, index: dict,
                     seed: int, model: str = "xgboost", folds: int = FOLDS, cross_fit: bool = True
                     ) -> dict | None:
    """Predict ``held``'s ``test`` rows by reference transfer from the largest device in ``rest``.

    Args:
        ex: GPU-evaluation examples (:func:`trappm_ray.train.gpu_examples.examples`).
        held: the held-out device; rest, test: example indices of the other devices / of it.
        index: graph rows by (arch, resolution, batch), as :func:`trappm_ray.train.gpu_examples.graph_index`.
        model, folds: the reference regressor (:func:`reference_fitter`) and its architecture folds.
        cross_fit: fit the reference regressor per architecture fold, so no test architecture is
            among its rows (a model new to every device); False: once on all the reference's rows,
            as the other models of a leave-one-device-out split see every architecture on the
            other devices (the band from its validation slice's residuals).

    Returns:
        None without a reference device; else ``reference``, ``rows`` (the test indices predicted:
        those whose run settings the reference's rows share), ``raw``/``pred``/``lo``/``hi`` in ms
        (``pred`` clamped to the held-out device's floor; the 95% band from the reference
        regressor's out-of-fold log residuals on its own rows).
    """
    ref = reference_device(ex, held, rest)
    if ref is None:
        return None
    ref_spec = devices.get(ref)
    ref_rows = np.array([i for i in rest if ex[i]["spec"] == ref], int)
    seen = {ex[i]["setting"] for i in ref_rows}
    cache: dict = {}
    moved = {i: on_device(ex[i], ref_spec, index, cache) for i in test if ex[i]["setting"] in seen}
    rows = np.array([i for i, v in moved.items() if v is not None], int)
    if not len(rows):
        return None
    # one set: the reference's own rows, then the test rows as they would run on the reference
    on_ref = [ex[i] for i in ref_rows] + [{**ex[i], "rkey": (*ex[i]["rkey"][:3], ref, *ex[i]["rkey"][4:]),
                                           "x": moved[i][1]} for i in rows]
    floor_ref = np.array([ex[i]["floor"] for i in ref_rows] + [moved[i][0] for i in rows])
    y = np.r_[[ex[i]["measured"] for i in ref_rows], np.ones(len(rows))] / floor_ref
    archs = sorted({ex[i]["arch"] for i in np.r_[ref_rows, rows]})
    fold = dict(zip(archs, np.random.default_rng(seed).permutation(len(archs)) % folds))
    arch_fold = np.array([fold[ex[i]["arch"]] for i in np.r_[ref_rows, rows]])
    n_ref = len(ref_rows)
    pred_ref, oof = np.zeros(len(rows)), np.full(n_ref, np.nan)
    fitter = reference_fitter(model, on_ref, y, index, seed)
    for k in range(folds if cross_fit else 1):
        train = np.where(arch_fold[:n_ref] != k)[0] if cross_fit else np.arange(n_ref)
        val = train[::7]  # early stopping and depth choice on a slice of the training side
        predict = fitter(np.setdiff1d(train, val), val)
        mine = np.where(arch_fold[n_ref:] == k)[0] if cross_fit else np.arange(len(rows))
        if len(mine):
            pred_ref[mine] = predict(n_ref + mine) * floor_ref[n_ref + mine]
        held_ref = np.where(arch_fold[:n_ref] == k)[0] if cross_fit else val
        oof[held_ref] = predict(held_ref) * floor_ref[held_ref]
    floor_held = np.array([ex[i]["floor"] for i in rows])
    raw = pred_ref * floor_held / floor_ref[n_ref:]
    kernels = np.exp(np.array([ex[i]["x"][KERNELS_COL] for i in rows]))
    pred = transfer_ms(pred_ref, floor_held, floor_ref[n_ref:], kernels, ex[rows[0]]["rkey"][5])
    scored = ~np.isnan(oof)
    resid = np.log(np.array([ex[i]["measured"] for i in ref_rows])[scored] / oof[scored])
    lo, hi = np.quantile(resid, 0.025), np.quantile(resid, 0.975)
    return {"reference": ref, "rows": rows, "raw": raw, "pred": pred,
            "lo": np.maximum(pred * math.exp(lo), floor_held), "hi": pred * math.exp(hi)}


def _nearest_batch(ex: list[dict], rows: list[int], batch: int, skip: int = -1) -> int | None:
    """Of reference ``rows`` (one architecture, resolution and setting), the one whose batch is
    nearest ``batch`` in ratio, as the product anchors on (not ``skip``); None if there is none."""
    by_batch = {ex[j]["rkey"][2]: j for j in sorted(rows, reverse=True) if j != skip}
    b = nearest_batch(by_batch, batch)
    return None if b is None else by_batch[b]


def measured_transfer_predict(ex: list[dict], held: str, rest: np.ndarray, test: np.ndarray,
                              index: dict) -> dict | None:
    """Reference transfer from the reference device's *measurement* of the same architecture,
    resolution and run settings, at the labeled batch nearest the test row's (within a factor 2,
    as the product anchors, :mod:`trappm_ray.model.anchors`): its measured / floor there, times
    the test graph's floor on the reference, moved by the floor ratio as in
    :func:`transfer_predict`. It isolates the device change from the reference regressor's own
    error: a model measured on the reference device, predicted on a device without labels.

    Returns:
        As :func:`transfer_predict`, on the test rows whose key the reference measured at some
        batch; the band from predicting each reference row from its nearest other batch.
    """
    ref = reference_device(ex, held, rest)
    if ref is None:
        return None
    ref_spec = devices.get(ref)
    by_key: dict[tuple, list[int]] = {}
    for i in rest:
        if ex[i]["spec"] == ref:
            by_key.setdefault((*ex[i]["rkey"][:2], ex[i]["setting"]), []).append(int(i))
    cache: dict = {}
    rows, ref_ms, floor_ref = [], [], []
    for i in test:
        j = _nearest_batch(ex, by_key.get((*ex[i]["rkey"][:2], ex[i]["setting"]), []), ex[i]["rkey"][2])
        on = on_device(ex[i], ref_spec, index, cache) if j is not None else None
        if on is None:
            continue
        rows.append(int(i))
        floor_ref.append(on[0])
        ref_ms.append(ex[j]["measured"] / ex[j]["floor"] * on[0])
    if not rows:
        return None
    rows = np.array(rows, int)
    floor_held = np.array([ex[i]["floor"] for i in rows])
    kernels = np.exp(np.array([ex[i]["x"][KERNELS_COL] for i in rows]))
    pred = transfer_ms(np.array(ref_ms), floor_held, np.array(floor_ref), kernels, ex[rows[0]]["rkey"][5])
    resid = [math.log(ex[j]["measured"] / (ex[k]["measured"] / ex[k]["floor"] * ex[j]["floor"]))
             for key_rows in by_key.values() for j in key_rows
             if (k := _nearest_batch(ex, key_rows, ex[j]["rkey"][2], skip=j)) is not None]
    lo, hi = np.quantile(resid, (0.025, 0.975)) if resid else (0.0, 0.0)
    return {"reference": ref, "rows": rows, "raw": np.array(ref_ms) * floor_held / np.array(floor_ref),
            "pred": pred, "lo": np.maximum(pred * math.exp(lo), floor_held), "hi": pred * math.exp(hi)}


def anchored_transfer(moved: dict, measured: dict | None) -> dict:
    """The product's answer for a device without labels, per row of ``moved`` (a
    :func:`transfer_predict` result): the reference's measurement of the same architecture,
    resolution and setting moved to the device (``measured``, a :func:`measured_transfer_predict`
    result) where there is one, else the reference regressor's answer moved."""
    out = {k: np.array(moved[k], dtype=float) for k in ("raw", "pred", "lo", "hi")}
    if measured is not None:
        at = {int(i): k for k, i in enumerate(measured["rows"])}
        for k, i in enumerate(moved["rows"]):
            if int(i) in at:
                for key in out:
                    out[key][k] = measured[key][at[int(i)]]
    return {"reference": moved["reference"], "rows": moved["rows"], **out}


__all__ = ["reference_device", "on_device", "reference_fitter", "transfer_predict", "measured_transfer_predict",
           "anchored_transfer"]
