"""Families nobody measured: the RTX 3090's training step (or inference pass) with whole
families held out.

A user's model is new by definition, so the predictor is judged on families it never saw, each
answer beside the physics it rests on (:mod:`trappm_ray.model.correction`):

* the **learned** answer: the boosters of the GPU recipe (XGBoost on the floor ratio, plain and
  on the relative design: :func:`trappm_ray.evaluate.gpu.ensemble`) with every family held out
  alone, or the shipped recipe (GNN + static MLP, :class:`~trappm_ray.evaluate.gpu_gnn.GnnModel`)
  on a few folds of families held out together (a GNN per family would take a day);
* the **physics** answer: the step model times per-kernel-class factors, and the class bounds,
  fitted on the same training rows (:func:`trappm_ray.train.correction_fit.fit_bounds`);
* what the product answers (**shipped**: the learned answer held within the bounds, its flag and
  interval) and candidates beside it: geometric blends of the held learned and the physics
  answers, each with a *family-conformal* interval (the 2.5-97.5% log residuals of the other
  folds' rows, every family weighted alike, so a family of 200 rows does not set the interval of
  a family of 4).

Per answer: MAPE, median, p90, the worst row and family, rows off by more than 50% and 2x, the
flag as a detector of errors above 50% (recall, false alarms), and the 95% interval's coverage
pooled and within each held-out family.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from trappm_ray import devices
from trappm_ray.corpus import multires_models
from trappm_ray.evaluate.gpu import ensemble, family_groups, fit_predict, val_by_family
from trappm_ray.evaluate.gpu_gnn import GnnModel
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.correction import FLAG, CorrectionBounds, layout_risk, out_of_domain, widened
from trappm_ray.model.device_features import SETTING_COLS
from trappm_ray.model.intervals import LEVELS, has_group, quantile_offsets, weighted_quantiles
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.stored import read_manifest
from trappm_ray.physics.kernel_classes import device_shares
from trappm_ray.physics.step_model import step_time
from trappm_ray.train.correction_fit import fit_bounds, step_rows
from trappm_ray.train.gpu_examples import graph_index
from trappm_ray.train.layout_fit import fit_layout, layout_rows, pairs

DEVICE, TARGET = "rtx3090-amp", "train_step_ms"
MEMBERS = ("xgboost", "xgboost-rel")
LARGE = 0.5  # an error the flag has to catch
BLENDS = (0.7, 0.5, 0.3)  # the held learned answer's share of a candidate's geometric blend with physics
INTERVALS = ("split-conformal on the residuals of the shipped answers on families held out where a target's "
             "quantiles name their 'folds' (jobs/evaluate_unseen.py --calibrate; the out-of-domain answers' own "
             "quantiles, 'flagged_values', widen a flagged answer's interval), else on held-out-architecture "
             "residuals pooled over seeds")


def physics_rows(ex: list[dict], labels: str, profiles: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per example (one target's), the step model (ms, with the launch ``profiles``' host figures)
    and its class shares of GPU time."""
    shares, step = step_rows(ex, graph_index(labels, ()), profiles)[ex[0]["target"]]
    return step, shares


def layout_of(ex: list[dict], labels: str) -> np.ndarray:
    """Per example its :func:`~trappm_ray.physics.kernel_classes.layout_shares`."""
    return layout_rows(ex, graph_index(labels, ()))


def _fold(ex: list[dict], train, val, test, seed: int, extra: dict | None = None) -> dict:
    if extra:
        fit = fit_predict(ex, train, val, test, "gnn", seed, extra)
    else:
        fit = ensemble(ex, val, test, {m: fit_predict(ex, train, val, test, m, seed) for m in MEMBERS})["ensemble"]
    return {"test": np.asarray(test), "seen": np.r_[train, val].astype(int), "pred": fit["pred"], "lo": fit["lo"],
            "hi": fit["hi"]}


def booster_folds(ex: list[dict], seed: int = 1337) -> list[dict]:
    """The boosters' answers with each family held out alone (15% of the others validating)."""
    out = []
    for family in sorted({e["family"] for e in ex}):
        rest = np.array([i for i, e in enumerate(ex) if e["family"] != family])
        test = np.array([i for i, e in enumerate(ex) if e["family"] == family])
        train, val = val_by_family(ex, rest, seed)
        out.append(_fold(ex, train, val, test, seed))
    return out


def gnn_folds(ex: list[dict], aux: list[dict], labels: str, groups: int, seeds: int, seed: int = 1337,
              encoder=None, kept: Callable[[int, Callable[[], dict]], dict] | None = None) -> list[dict]:
    """The shipped recipe's answers on ``groups`` folds of families held out together
    (:func:`~trappm_ray.evaluate.gpu.family_groups`); ``aux``: the device's rows of its other target;
    ``encoder``: a pretrained graph encoder whose embedding the networks read too (does pretraining
    help where it matters, on families nobody labeled?); ``kept(k, fit)``: fold ``k``'s answers,
    from a store where an earlier run left them, else ``fit()`` stored (a run stopped after a fold
    of about 15 minutes resumes after it)."""
    gnn = GnnModel(ex, graph_index(labels, ()), 60, seeds, aux, encoder=encoder)
    keep = kept or _fit_now
    out = []
    for k, held in enumerate(family_groups(ex, groups)):
        rest = np.array([i for i, e in enumerate(ex) if e["family"] not in held])
        train, val = val_by_family(ex, rest, seed)
        test = np.array([i for i, e in enumerate(ex) if e["family"] in held])

        def fit(train=train, val=val, test=test) -> dict:
            return _fold(ex, train, val, test, seed, {"gnn": gnn})
        out.append(keep(k, fit))
    return out


def _fit_now(_k: int, fit: Callable[[], dict]) -> dict:
    return fit()


@dataclass
class Answers:
    """Per test row of a set of folds: what was measured and what each side answered.

    Attributes:
        measured, family, arch, batch, fold: the row (``fold``: which fold tested it).
        learned, lo, hi: the learned answer and its own 95% band.
        physics, low, high: the physics answer and the class bounds (ms), fitted on the fold's
            training rows only.
        layout: out of domain by its layout alone: a move to channels-last of a graph whose time is
            in kinds the library runs far slower so
            (:meth:`~trappm_ray.model.layout.LayoutFactors.out_of_domain`), or, for an NHWC row with no NCHW
            twin to move from, :func:`~trappm_ray.model.correction.layout_risk`.
        nhwc: a channels-last row.
        factor: a channels-last row moved from its NCHW twin's answers (each ``x factor``, the
            fold's layout factors fitted on its training rows); 1 for a row answered as it is.
    """

    measured: np.ndarray
    family: np.ndarray
    arch: np.ndarray
    batch: np.ndarray
    fold: np.ndarray
    learned: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    physics: np.ndarray
    low: np.ndarray
    high: np.ndarray
    layout: np.ndarray
    factor: np.ndarray
    nhwc: np.ndarray

    @property
    def moved(self) -> np.ndarray:
        return self.factor != 1.0

    def where(self, mask: np.ndarray) -> Answers:
        """These answers' rows where ``mask`` holds."""
        return Answers(**{f.name: getattr(self, f.name)[mask] for f in fields(self)})


def answers(ex: list[dict], folds: list[dict], step: np.ndarray, shares: np.ndarray,
            layout: np.ndarray | None = None) -> Answers:
    """The folds' learned answers beside the physics fitted on each fold's training rows; with
    ``layout`` (per example its :func:`~trappm_ray.physics.kernel_classes.layout_shares`) every
    NHWC row whose NCHW twin the same fold tests is answered as the product does, moved from the
    twin's answers by the layout factors fitted on the fold's training rows
    (:mod:`trappm_ray.model.layout`)."""
    measured = np.array([e["measured"] for e in ex])
    rows = []
    for f in folds:
        seen = f["seen"]
        bounds = fit_bounds(shares[seen], measured[seen] / step[seen])
        for i in f["test"]:
            factor_lo, factor_hi = bounds.factors(shares[i])
            rows.append((step[i] * bounds.physics(shares[i]), step[i] * factor_lo, step[i] * factor_hi))
    physics, low, high = (np.array(v, float) for v in zip(*rows))
    idx = np.concatenate([f["test"] for f in folds]).astype(int)
    learned, lo, hi = (np.concatenate([f[k] for f in folds]) for k in ("pred", "lo", "hi"))
    nhwc = SETTING_COLS.index("nhwc")
    risk = np.array([layout_risk(ex[i]["target"], shares[i], "nhwc" if ex[i]["setting"][nhwc] else "nchw") for i in idx],
                    dtype=bool)
    factor = np.ones(len(idx))
    if layout is not None:
        _move(ex, folds, idx, layout, (learned, lo, hi, physics, low, high), factor, risk)
    return Answers(measured=measured[idx], family=np.array([ex[i]["family"] for i in idx]),
                   arch=np.array([ex[i]["arch"] for i in idx]), batch=np.array([int(ex[i]["rkey"][2]) for i in idx]),
                   fold=np.concatenate([[k] * len(f["test"]) for k, f in enumerate(folds)]).astype(int),
                   learned=learned, lo=lo, hi=hi, physics=physics, low=low, high=high, layout=risk,
                   factor=factor, nhwc=np.array([bool(ex[i]["setting"][nhwc]) for i in idx]))


def _move(ex: list[dict], folds: list[dict], idx: np.ndarray, layout: np.ndarray, answers: tuple[np.ndarray, ...],
          factor: np.ndarray, risk: np.ndarray) -> None:
    """In place, per fold: each NHWC test row whose NCHW twin the fold tests too takes the twin's
    ``answers`` times the layout factor fitted on the fold's training pairs of the same framework
    setting (``factor``), and its flag from that move (``risk``)."""
    at = {int(i): k for k, i in enumerate(idx)}
    every = pairs(ex)
    for f in folds:
        test = set(int(i) for i in f["test"])
        seen = [int(i) for i in f["seen"]]
        by_run: dict[tuple, list[tuple[int, int]]] = {}  # each framework setting moved by its own pairs
        for i, j in every:
            if i in test and j in test:
                by_run.setdefault(tuple(ex[i]["rkey"][7:9]), []).append((i, j))
        for run, twins in by_run.items():
            target = ex[twins[0][0]]["target"]
            fitted = fit_layout([ex[i] for i in seen], layout[seen], band=False, runs={target: run}).get(target)
            if fitted is None:
                continue
            for i, j in twins:
                k, m = at[i], at[j]
                factor[k] = fitted.factor(layout[j])
                for arr in answers:
                    arr[k] = arr[m] * factor[k]
                risk[k] = fitted.out_of_domain(layout[j])


def family_conformal(a: Answers, pred: np.ndarray, coverage: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """A ``coverage`` interval around ``pred`` per row from the log residuals of the rows of the
    other folds, every family weighted alike."""
    r = np.log(a.measured / pred)
    counts = pd.Series(a.family).map(pd.Series(a.family).value_counts()).to_numpy()
    lo, hi = np.empty(len(r)), np.empty(len(r))
    for k in np.unique(a.fold):
        other, this = a.fold != k, a.fold == k
        q = weighted_quantiles(r[other], 1.0 / counts[other], ((1 - coverage) / 2, (1 + coverage) / 2))
        lo[this], hi[this] = pred[this] * math.exp(q[0]), pred[this] * math.exp(q[1])
    return lo, hi


def shipped_interval(a: Answers, held: np.ndarray, flag: np.ndarray, quantiles: dict, z: float = 1.96
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval the product gives each answer from residual ``quantiles`` of one target
    (a manifest's ``residual_quantiles[target]``): the band around the answer and, where the flag
    is raised, the class bounds and the flagged answers' own band too
    (:func:`trappm_ray.model.correction.hold`); a row moved to channels-last from the moved
    answers' own quantiles where they keep them (``--calibrate`` stores them)."""
    store = {"t": quantiles}
    lo, hi = quantile_offsets(store, "t", z)
    low, high = held * math.exp(lo), held * math.exp(hi)
    if has_group(store, "t", "moved"):
        mlo, mhi = quantile_offsets(store, "t", z, "moved")
        low, high = np.where(a.moved, held * math.exp(mlo), low), np.where(a.moved, held * math.exp(mhi), high)
    band = quantile_offsets(store, "t", z, "flagged") if has_group(store, "t", "flagged") else None
    wide_low, wide_high = widened(held, low, high, a.low, a.high, band)
    return np.where(flag, wide_low, low), np.where(flag, wide_high, high)


def family_out_quantiles(r: np.ndarray, flag: np.ndarray, moved: np.ndarray | None = None) -> dict:
    """Residual quantiles (:data:`~trappm_ray.model.intervals.LEVELS`) of answers on families held
    out, log(measured / answer), every row alike: ``values`` of the answers the flag let pass,
    ``flagged_values`` of those it raised, ``moved_values`` of those it let pass that were moved
    to channels-last from NCHW (Mondrian split-conformal: each group its own quantiles; weighting
    families alike instead widened the band to 5.8x for 95.5% coverage). A group without rows:
    ``values`` from every row it would hold, no set of its own."""
    moved = np.zeros(len(r), bool) if moved is None else moved
    plain = ~flag & ~moved
    base = plain if plain.any() else ~flag if (~flag).any() else np.ones(len(r), bool)
    out = {"levels": list(LEVELS), "values": weighted_quantiles(r[base]), "rows": int(plain.sum())}
    for name, rows in (("flagged", flag), ("moved", ~flag & moved)):
        if rows.any():
            out.update({f"{name}_values": weighted_quantiles(r[rows]), f"{name}_rows": int(rows.sum())})
    return out


def family_out_interval(a: Answers, held: np.ndarray, flag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What calibrating the product's interval on families held out (:func:`family_out_quantiles`)
    does on a family it was not calibrated on: each fold's rows banded from the other folds'."""
    r = np.log(a.measured / held)
    lo, hi = np.empty(len(r)), np.empty(len(r))
    for k in np.unique(a.fold):
        this = a.fold == k
        q = family_out_quantiles(r[~this], flag[~this], a.moved[~this])
        lo_k, hi_k = shipped_interval(a, held, flag, q)
        lo[this], hi[this] = lo_k[this], hi_k[this]
    return lo, hi


def held_answer(a: Answers, flag_at: float = FLAG) -> tuple[np.ndarray, np.ndarray]:
    """The shipped answer (the learned one held within the class bounds) and its flag."""
    held = np.clip(a.learned, a.low, a.high)
    return held, out_of_domain(a.learned, a.physics, held, a.learned, flag_at) | a.layout


def candidates(a: Answers, quantiles: dict, flag_at: float = FLAG
               ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]:
    """Name -> (answer, interval low, high, flag or None) for every answer compared.
    ``quantiles``: the shipped predictor's residual quantiles of the target (its manifest's),
    which the shipped answer's interval is read from; ``flag_at``: the learned / physics factor
    (log) beyond which an answer is out of domain."""
    held, flag = held_answer(a, flag_at)
    out = {"learned alone, its own band": (a.learned, a.lo, a.hi, None),
           "physics alone, family-conformal": (a.physics, *family_conformal(a, a.physics), None),
           "shipped: learned held within the class bounds": (held, *shipped_interval(a, held, flag, quantiles), flag),
           "shipped, family-out interval (other folds' residuals)": (held, *family_out_interval(a, held, flag), flag),
           "shipped, family-conformal interval": (held, *family_conformal(a, held), flag)}
    for w in BLENDS:
        pred = np.exp(w * np.log(held) + (1 - w) * np.log(a.physics))
        out[f"blend, learned share {w:g}, family-conformal"] = (pred, *family_conformal(a, pred), flag)
    return out


def summary(a: Answers, pred: np.ndarray, lo: np.ndarray, hi: np.ndarray, flag: np.ndarray | None) -> dict:
    """Errors, the flag as a detector, and coverage pooled and per family, of one answer."""
    ratio = pred / a.measured
    err = np.abs(ratio - 1)
    by_family = pd.Series(np.log(ratio)).groupby(a.family).median()
    worst_family = str(by_family.abs().idxmax())
    covered = pd.Series((a.measured >= lo) & (a.measured <= hi))
    per_family = covered.groupby(a.family).mean()
    sizes = covered.groupby(a.family).size()
    worst = int(np.argmax(np.abs(np.log(ratio))))
    large = err > LARGE
    out = {"rows": int(len(err)), "families": int(len(by_family)), "mape": 100 * float(err.mean()),
           "median": 100 * float(np.median(err)), "p90": 100 * float(np.quantile(err, 0.9)),
           "worst_row": f"{a.arch[worst]} at batch {a.batch[worst]}: {ratio[worst]:.2f}x",
           "rows_over_50pct": int(large.sum()), "rows_over_2x": int(np.sum(np.abs(np.log(ratio)) > math.log(2))),
           "families_median_over_1_5x": int(np.sum(by_family.abs() > math.log(1.5))),
           "worst_family": f"{worst_family} {math.exp(by_family[worst_family]):.2f}x",
           "coverage": 100 * float(covered.mean()), "families_covered_90": 100 * float(np.mean(per_family >= 0.9)),
           "families_covered_90_98": 100 * float(np.mean((per_family >= 0.9) & (per_family <= 0.98))),
           "families5_covered_90": 100 * float(np.mean(per_family[sizes >= 5] >= 0.9)),
           "median_width": float(np.median(hi / lo))}
    if flag is not None:
        out["flag_recall"] = 100 * float(flag[large].mean()) if large.any() else float("nan")
        out["flag_false_alarms"] = 100 * float(flag[~large].mean())
    return out


def by_layout(a: Answers) -> dict[str, dict]:
    """The shipped answer with its family-out interval (:func:`family_out_interval`, calibrated on
    every fold's rows) summarised on the NCHW and the channels-last rows apart."""
    held, flag = held_answer(a)
    lo, hi = family_out_interval(a, held, flag)
    return {name: summary(a.where(m), held[m], lo[m], hi[m], flag[m])
            for name, m in (("NCHW", ~a.nhwc), ("channels-last", a.nhwc)) if m.any()}


def per_family(a: Answers, pred: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[dict]:
    """One answer's rows per family: median ratio to the measured, MAPE, worst row, coverage."""
    df = pd.DataFrame({"family": a.family, "ratio": pred / a.measured, "covered": (a.measured >= lo) & (a.measured <= hi)})
    out = []
    for fam, g in df.groupby("family"):
        r = g["ratio"].to_numpy()
        out.append({"family": str(fam), "rows": int(len(g)), "median_ratio": float(np.median(r)),
                    "mape": 100 * float(np.mean(np.abs(r - 1))), "worst_ratio": float(r[np.argmax(np.abs(np.log(r)))]),
                    "coverage": 100 * float(g["covered"].mean())})
    return sorted(out, key=lambda d: -abs(math.log(d["median_ratio"])))


def constructed(uri: str, answer, batch: int = 256) -> list[dict]:
    """The multi-resolution nets built here (:mod:`trappm_ray.corpus.multires_models`), which no
    label holds: the step model, the physics answer of the predictor at ``uri`` and the
    product's ``answer(onnx_bytes, batch)`` (a :class:`~trappm_ray.serving.prediction.Prediction`),
    training step at ``batch``."""
    manifest = read_manifest(uri)
    if not manifest.device.spec:
        raise ValueError(f"{uri}: not a GPU predictor (its device names no spec)")
    spec = devices.resolve(manifest.device.spec)
    bounds = CorrectionBounds.from_dict(manifest.correction[TARGET])
    setting = {"precision": "amp-fp16", "optimizer": "sgd-momentum"}
    out = []
    for width in multires_models.WIDTHS:
        for branches in multires_models.BRANCHES:
            model = multires_models.name(width, branches)
            onnx = multires_models.export(model)
            graph = featurize(onnx, batch)
            step = step_time(graph, spec, setting, "train", step_host_us(manifest.launch)).total_ms
            p = answer(onnx, batch)
            out.append({"net": model, "batch": batch, "step_model_ms": step,
                        "physics_ms": step * bounds.physics(device_shares(graph, spec, setting["precision"])),
                        "product_ms": p.train_step_ms.value, "low_ms": p.train_step_ms.low, "high_ms": p.train_step_ms.high,
                        "flagged": any("out of domain" in n for n in p.notes)})
    return out


__all__ = ["constructed", "DEVICE", "TARGET", "LARGE", "BLENDS", "INTERVALS", "Answers", "physics_rows", "booster_folds", "gnn_folds", "answers",
           "family_conformal", "family_out_interval", "family_out_quantiles", "held_answer", "shipped_interval",
           "candidates", "summary", "per_family"]
