"""GPU evaluation against the roofline floor: step time and inference latency on the public GPU
labels, per device, on the project's splits, plus leave-one-device-out for inference.

Every prediction is measured against the roofline floor (:mod:`trappm_ray.physics.roofline`,
Williams et al., CACM 2009) of the same graph on the same device. Models: ``roofline`` (the floor
itself), ``roofline-eff`` (floor x one efficiency per device: the median measured/floor ratio of
the training rows; for an unseen device, pooled over the others), and ``xgboost``/``mlp`` (the
static baselines of :mod:`trappm_ray.evaluate.baselines`) on v2 static features + the device's
spec vector + log roofline terms + run settings, predicting log(measured / floor). Every
prediction is clamped to at least the floor (a step cannot beat the hardware); the share of raw
predictions below it is reported. 95% intervals are split-conformal: the 2.5/97.5% quantiles of
the log residuals on the validation rows, around each test prediction.
"""
from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import numpy as np

from trappm_ray.evaluate.baselines import fit_mlp, fit_xgboost
from trappm_ray.evaluate.gpu_report import markdown
from trappm_ray.evaluate.gpu_floor_ratio import anchored_transfer, measured_transfer_predict, transfer_predict
from trappm_ray.model.spec_model import design
from trappm_ray.model.static_mlp import GNN_SHARE
from trappm_ray.train.gpu_examples import examples, graph_index
from trappm_ray.train.splits import split

log = logging.getLogger(__name__)

MODELS = ("roofline", "roofline-eff", "xgboost", "xgboost-rel", "mlp")
ENSEMBLED = ("xgboost", "xgboost-rel", "mlp", "gnn")  # averaged in log space as ``ensemble``
AGREE = 2.0  # an ensemble member further than this factor from the members' median sits that row out
# xgboost-rel: the spec-based predictor's feature design (trappm_ray/model/spec_model.py)
SPEC_VARIANT = "relative"


@dataclass
class GpuEvalConfig:
    """What the GPU evaluation covers.

    Args:
        labels: label directory (``<labels>/<device-slug>/labels.parquet``, ``graphs.parquet``).
        corpora: graph corpora whose ``graphs/<arch>@<res>.parquet`` rows join the labels.
        slugs: label device folders to use (empty: every folder whose device has a roofline).
        seeds: seeds of the random and held-out-architecture splits (three: the held-out
            architectures' figure moves by 1-1.5 points with the draw alone). models: any of ``MODELS``.
        family_folds: leave-family-out folds (:func:`family_groups`; 0: one per family).
        task_slugs: device folders with per-device splits (empty: all; fewer than ``min_rows``
            joined rows: none); every device's inference rows join leave-one-device-out.
        gnn_tasks, gnn_epochs: ``slug/target`` keys that also get the GNN (``gpu_gnn.py``); its cap.
        gnn_seeds: the GNN's networks per fit, averaged (a shipped GPU predictor holds 3).
        gnn_share: the GNN's share of its blend with the static MLP (as the shipped predictors').
        gnn_auxiliary: the GNN also trains on the device's rows of its other targets, never of a
            validation or test architecture (as the shipped RTX 3090 training-step networks do).
        encoder_from: a shipped predictor whose encoder the ``encoder-recipe`` model of those
            tasks uses (empty, the default: no such model; ``trappm_ray/predictors/default`` adds
            the CPU predictor's recipe, ~1.3 min a split; its figures: ``docs/training.md``).
        out_md, out_json: the report files.
    """

    labels: str = "data/labels"
    corpora: tuple[str, ...] = ("artifacts/corpus-gpu",)
    slugs: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (1337, 1338, 1339)
    family_folds: int = 5
    models: tuple[str, ...] = MODELS
    task_slugs: tuple[str, ...] = ("rtx3090-amp", "rtx4090-amp")
    min_rows: int = 20
    gnn_tasks: tuple[str, ...] = ("rtx3090-amp/train_step_ms",)
    gnn_epochs: int = 60
    gnn_seeds: int = 3
    gnn_share: float = GNN_SHARE
    gnn_auxiliary: bool = True
    encoder_from: str = ""
    out_md: str = "docs/results-gpu.md"
    out_json: str = "docs/results-gpu.json"


def _interval(meas_val, pred_val) -> tuple[float, float]:
    """Split-conformal 95% band in log space from validation residuals ((0, 0) without any)."""
    r = np.log(meas_val / pred_val) if len(meas_val) else np.zeros(1)
    return float(np.quantile(r, 0.025)), float(np.quantile(r, 0.975))


def fit_predict(ex: list[dict], train, val, test, model: str, seed: int, extra: dict | None = None) -> dict:
    """Fit ``model`` on ``train`` (``val`` for early stopping and the interval), predict ``test``.
    ``extra``: more models, name -> ``f(ex, train, val, idx, seed)`` giving ms for ``idx``.
    Returns:
        ``raw`` (before clamping), ``pred`` (clamped to the floor), ``lo``/``hi`` (95% band), in ms.
    """
    meas = np.array([e["measured"] for e in ex])
    floor = np.array([e["floor"] for e in ex])
    idx = np.concatenate([val, test])
    if extra and model in extra:
        raw = extra[model](ex, *extra_args(train, val, test), seed)
    elif model == "roofline":
        raw = floor[idx]
    elif model == "roofline-eff":
        # one efficiency per device; a device without training rows gets the median over the
        # training rows of its kind (GPUs for a GPU), or over all of them
        ratios = defaultdict(list)
        for i in train:
            for k in (ex[i]["spec"], ex[i]["kind"], "all"):
                ratios[k].append(meas[i] / floor[i])
        raw = np.array([floor[i] * np.median(next(ratios[k] for k in (ex[i]["spec"], ex[i]["kind"], "all")
                                                  if ratios.get(k))) for i in idx])
    else:
        x = np.stack([e["x"] for e in ex]).astype(np.float64)
        if model == "xgboost-rel":
            x = design(x, SPEC_VARIANT)
        fit = {"xgboost": fit_xgboost, "xgboost-rel": fit_xgboost, "mlp": fit_mlp}[model]
        out = fit(x, meas / floor, np.asarray(train), np.asarray(val if len(val) else train), seed)
        raw = out["predict"](idx) * floor[idx]
    return _banded(meas, floor, val, test, raw)


def extra_args(train, val, test) -> tuple:
    """``(train, val, idx)`` as :func:`fit_predict` passes them to an ``extra`` model (no
    validation rows: the training rows validate; ``idx``: validation then test rows)."""
    return np.asarray(train), np.asarray(val if len(val) else train), np.concatenate([val, test])


def _banded(meas: np.ndarray, floor: np.ndarray, val, test, raw: np.ndarray) -> dict:
    """``raw`` ms for ``val`` then ``test`` -> the fit dict of :func:`fit_predict` (+ ``val_raw``)."""
    pred = np.maximum(raw, floor[np.concatenate([val, test]).astype(int)])
    lo, hi = _interval(meas[val], pred[:len(val)])
    p = pred[len(val):]
    return {"raw": raw[len(val):], "pred": p, "lo": np.maximum(p * math.exp(lo), floor[test]),
            "hi": p * math.exp(hi), "val_raw": raw[:len(val)]}


def ensemble(ex: list[dict], val, test, fits: dict) -> dict:
    """Per row, the geometric mean of the learned models' fits (``ENSEMBLED`` among ``fits``)
    within :data:`AGREE` of their median (a member extrapolating far off, an MLP on an unseen
    device, is left out of that row), and their median (``ensemble-median``), each banded from
    its own validation residuals; empty without at least two of them."""
    members = [f for m, f in fits.items() if m in ENSEMBLED]
    if len(members) < 2:
        return {}
    meas = np.array([e["measured"] for e in ex])
    floor = np.array([e["floor"] for e in ex])
    logs = np.log([np.r_[f["val_raw"], f["raw"]] for f in members])
    med = np.median(logs, 0)
    near = np.abs(logs - med) <= math.log(AGREE)
    mean = np.where(near.any(0), (logs * near).sum(0) / np.maximum(near.sum(0), 1), med)
    val, test = np.asarray(val, int), np.asarray(test, int)
    return {"ensemble": _banded(meas, floor, val, test, np.exp(mean)),
            "ensemble-median": _banded(meas, floor, val, test, np.exp(med))}


def _metrics(ex: list[dict], folds: list[tuple[np.ndarray, dict]]) -> dict:
    """Pooled over folds: overall MAPE, mean over families, below-floor shares, 95% coverage."""
    meas = np.array([e["measured"] for e in ex])
    floor = np.array([e["floor"] for e in ex])
    idx = np.concatenate([t for t, _ in folds]).astype(int)
    cat = {k: np.concatenate([f[k] for _, f in folds]) for k in ("raw", "pred", "lo", "hi")}
    err = np.abs(cat["pred"] / meas[idx] - 1) * 100
    fams = np.array([ex[i]["family"] for i in idx])
    per_family = {f: float(err[fams == f].mean()) for f in sorted(set(fams))}
    return {"mape": float(err.mean()), "family_mape": float(np.mean(list(per_family.values()))),
            "median_ape": float(np.median(err)), "n_test": int(len(idx)), "folds": len(folds),
            "raw_below_floor": float(np.mean(cat["raw"] < floor[idx] * (1 - 1e-9))),
            "pred_below_floor": float(np.mean(cat["pred"] < floor[idx] * (1 - 1e-9))),
            "coverage95": float(np.mean((meas[idx] >= cat["lo"]) & (meas[idx] <= cat["hi"]))),
            "per_family": per_family}


def _val_by_arch(ex: list[dict], idx: np.ndarray, seed: int, share: float = 0.15) -> tuple:
    """Split ``idx`` into (train, val) with ``share`` of its architectures in val."""
    archs = sorted({ex[i]["arch"] for i in idx})
    val = set(np.random.default_rng(seed).choice(archs, max(1, round(len(archs) * share)), replace=False))
    return tuple(np.array([i for i in idx if (ex[i]["arch"] in val) == side], int) for side in (False, True))


def val_by_family(ex: list[dict], idx: np.ndarray, seed: int, share: float = 0.15) -> tuple:
    """Split ``idx`` into (train, val) with ``share`` of its families (at least one) in val: a
    leave-family-out test is validated, and its interval calibrated, on families unseen too."""
    fams = sorted({ex[i]["family"] for i in idx})
    if len(fams) < 2:
        return _val_by_arch(ex, idx, seed, share)
    val = set(np.random.default_rng(seed).choice(fams, max(1, round(len(fams) * share)), replace=False))
    return tuple(np.array([i for i in idx if (ex[i]["family"] in val) == side], int) for side in (False, True))


def family_groups(ex: list[dict], folds: int) -> list:
    """Leave-family-out folds: every family alone (``folds`` 0), or the families dealt, largest
    first, into ``folds`` groups held out together (stricter than one family at a time)."""
    sizes = defaultdict(int)
    for e in ex:
        sizes[e["family"]] += 1
    order = sorted(sizes, key=lambda f: (-sizes[f], f))
    return order if folds <= 0 else [frozenset(order[k::folds]) for k in range(min(folds, len(order)))]


def evaluate_task(ex: list[dict], cfg: GpuEvalConfig, extra: dict | None = None) -> dict:
    """random / arch / family splits of one device x target (``ex`` are its examples); ``extra``
    as in :func:`fit_predict`."""
    rows = [{"family": e["family"], "arch": e["arch"]} for e in ex]
    fams = sorted({e["family"] for e in ex})
    plans = {"random": [(s, None) for s in cfg.seeds], "arch": [(s, None) for s in cfg.seeds],
             "family": [(cfg.seeds[0], f) for f in family_groups(ex, cfg.family_folds) if len(fams) > 1]}
    out = {}
    for kind, folds in plans.items():
        splits = [split(rows, kind, seed, family) if isinstance(family, (str, type(None))) else
                  (*val_by_family(ex, np.array([i for i, e in enumerate(ex) if e["family"] not in family]), seed),
                   np.array([i for i, e in enumerate(ex) if e["family"] in family], int))
                  for seed, family in folds]
        splits = [(s, t) for s, t in zip(folds, splits) if len(t[2]) and len(t[0])]
        if not splits:
            continue
        for fn in (extra or {}).values():  # every split's networks at once, where the model can
            if hasattr(fn, "prefit"):
                fn.prefit([(*extra_args(tr, va, te), seed) for (seed, _), (tr, va, te) in splits], kind)
        fits = []
        for (seed, _), (tr, va, te) in splits:
            f = {m: fit_predict(ex, tr, va, te, m, seed, extra) for m in cfg.models + tuple(extra or ())}
            fits.append((te, {**f, **ensemble(ex, va, te, f)}))
        out[kind] = {m: _metrics(ex, [(te, f[m]) for te, f in fits]) for m in fits[0][1]}
        log.info("%s: %s", kind, {m: round(v["mape"], 1) for m, v in out[kind].items()})
    return out


def _subset(fit: dict, keep: np.ndarray) -> dict:
    """A fit dict restricted to the test rows ``keep`` (a mask over its test rows)."""
    return {k: fit[k][keep] for k in ("raw", "pred", "lo", "hi")}


def settings_seen(ex: list[dict], train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """The ``test`` rows whose run settings (compiled, memory format, torch 2, precision class)
    some ``train`` row of the same device kind shares: an unseen device's rows in a setting no
    other device was measured in (the RTX 4090's torch.compile runs) are a second unknown."""
    seen = {(ex[i]["kind"], ex[i].get("setting")) for i in train}
    return np.array([i for i in test if (ex[i]["kind"], ex[i].get("setting")) in seen], int)


def evaluate_lodo(ex: list[dict], cfg: GpuEvalConfig, index: dict | None = None) -> dict:
    """Leave one device out, inference: train on every other device's rows, test on its rows;
    where some of them ran in settings no training row of that kind has, the rows in seen
    settings are also scored alone (key ``<device> (settings seen)``). With the graph ``index``,
    also :func:`~trappm_ray.evaluate.gpu_floor_ratio.transfer_predict` (key ``<device> (reference
    <ref>)``: every model scored on the rows the transfer covers, among them ``transfer``, whose
    reference regressor never saw the test row's architecture, and ``transfer-seen``, fitted on
    all the reference's rows as the other models see every architecture on the other devices); and
    on the rows whose architecture, resolution and setting the reference measured (key ``<device>
    (reference <ref>, key measured there)``), ``transfer-measured``: that measurement moved, the
    device change alone (:func:`~trappm_ray.evaluate.gpu_floor_ratio.measured_transfer_predict`)."""
    counts = defaultdict(int)
    for e in ex:
        counts[e["spec"]] += 1
    specs = sorted(s for s, n in counts.items() if n >= cfg.min_rows)  # the others only train
    out = {}
    for spec in specs if len(specs) > 1 else []:
        test = np.array([i for i, e in enumerate(ex) if e["spec"] == spec], int)
        rest = np.array([i for i, e in enumerate(ex) if e["spec"] != spec], int)
        tr, va = _val_by_arch(ex, rest, cfg.seeds[0])
        fits = {m: fit_predict(ex, tr, va, test, m, cfg.seeds[0]) for m in cfg.models}
        fits.update(ensemble(ex, va, test, fits))
        out[spec] = {m: _metrics(ex, [(test, f)]) for m, f in fits.items()}
        seen = settings_seen(ex, rest, test)
        if 0 < len(seen) < len(test):
            keep = np.isin(test, seen)
            out[f"{spec} (settings seen)"] = {
                m: _metrics(ex, [(test[keep], _subset(f, keep))]) for m, f in fits.items()}
        moved = transfer_predict(ex, spec, rest, test, index, cfg.seeds[0]) if index else None
        if moved is not None:
            keep = np.isin(test, moved["rows"])
            seen_archs = transfer_predict(ex, spec, rest, test, index, cfg.seeds[0], cross_fit=False)
            out[f"{spec} (reference {moved['reference']})"] = {
                **{m: _metrics(ex, [(test[keep], _subset(f, keep))]) for m, f in fits.items()},
                "transfer": _metrics(ex, [(moved["rows"], moved)]),
                "transfer-seen": _metrics(ex, [(seen_archs["rows"], seen_archs)])}
            measured = measured_transfer_predict(ex, spec, rest, test, index)
            out[f"{spec} (reference {moved['reference']})"]["transfer-anchored"] = _metrics(
                ex, [(moved["rows"], anchored_transfer(moved, measured))])
            if measured is not None:  # the device change alone: rows whose key the reference measured
                mine = np.isin(test, measured["rows"])
                out[f"{spec} (reference {moved['reference']}, key measured there)"] = {
                    **{m: _metrics(ex, [(test[mine], _subset(f, mine))]) for m, f in fits.items()},
                    "transfer-measured": _metrics(ex, [(measured["rows"], measured)])}
        log.info("lodo %s: %s", spec, {m: round(v["mape"], 1) for m, v in out[spec].items()})
    return out


def floor_check(ex: list[dict]) -> dict:
    """Per device folder x target: how measured times sit against the floor (ratio measured/floor)."""
    by = defaultdict(list)
    for e in ex:
        by[f"{e['slug']}/{e['target']}"].append(e["measured"] / e["floor"])
    return {k: {"n": len(v), "below": int(np.sum(np.array(v) < 1)), "min": float(np.min(v)),
                "median": float(np.median(v)), "max": float(np.max(v))} for k, v in sorted(by.items())}


def finite(obj):
    """``obj`` with every non-finite float (an MLP that overflowed on an unseen device) as None,
    so the JSON file stays strict JSON; the markdown keeps printing them as ``inf``."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj


def run_gpu_evaluation(cfg: GpuEvalConfig) -> dict:
    """Build the examples, evaluate every device x target and leave-one-device-out, and write
    ``cfg.out_json`` and ``cfg.out_md``. Returns the report."""
    t0 = time.time()
    index = graph_index(cfg.labels, cfg.corpora)
    ex, counts = examples(cfg.labels, cfg.corpora, cfg.slugs, index)
    tasks = {}
    for key in sorted({f"{e['slug']}/{e['target']}" for e in ex}):
        sub = [e for e in ex if f"{e['slug']}/{e['target']}" == key]
        small = len(sub) < cfg.min_rows or len({e["arch"] for e in sub}) < 4
        if small or (cfg.task_slugs and sub[0]["slug"] not in cfg.task_slugs):
            continue
        log.info("%s: %d rows, %d archs", key, len(sub), len({e["arch"] for e in sub}))
        extra = None
        if key in cfg.gnn_tasks:
            from trappm_ray.evaluate.gpu_gnn import GnnModel, encoder_recipe_model  # torch_geometric only when asked
            from trappm_ray.model.predictor import Predictor

            aux = [e for e in ex if cfg.gnn_auxiliary and e["slug"] == sub[0]["slug"] and e["target"] != sub[0]["target"]]
            gnn = GnnModel(sub, index, cfg.gnn_epochs, cfg.gnn_seeds, aux, cfg.gnn_share)
            extra = {"gnn": gnn, "gnn-val-share": gnn.val_share, "gnn-alone": gnn.alone}
            if cfg.encoder_from:
                extra["encoder-recipe"] = encoder_recipe_model(
                    sub, index, Predictor.load(cfg.encoder_from).encoder, sub[0]["target"], cfg.gnn_epochs)
        tasks[key] = {"rows": len(sub), "architectures": len({e["arch"] for e in sub}),
                      "families": len({e["family"] for e in sub}), "measured_below_floor": float(np.mean([e["measured"] < e["floor"] for e in sub])),
                      "splits": evaluate_task(sub, cfg, extra)}
        if extra:
            tasks[key]["gnn_blend_weights"] = [list(kw) for kw in gnn.weights]
    inf = [e for e in ex if e["target"] == "inference_ms"]
    lodo = {"rows": len(inf), "devices": evaluate_lodo(inf, cfg, index)}
    # stamped after leave-one-device-out, so that it dates the whole report
    report = {"meta": {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "config": asdict(cfg), "rows": counts},
              "floor_check": floor_check(ex), "tasks": tasks, "lodo_inference": lodo}
    report["meta"]["wall_s"] = round(time.time() - t0, 1)
    with open(cfg.out_json, "w", encoding="utf-8") as fh:
        json.dump(finite(report), fh, indent=1, sort_keys=True)
    with open(cfg.out_md, "w", encoding="utf-8") as fh:
        fh.write(markdown(report))
    return report


__all__ = ["MODELS", "ENSEMBLED", "GpuEvalConfig", "extra_args", "ensemble", "val_by_family", "graph_index", "examples", "fit_predict", "floor_check", "evaluate_task",
           "settings_seen", "evaluate_lodo", "finite", "run_gpu_evaluation"]
