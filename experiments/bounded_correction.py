"""The physics answer by kind of kernel beside the learned one, on families the learner never
saw: blend, bounds and the out-of-domain signal of :mod:`trappm_ray.model.correction` (issue 43).

    .venv/bin/python experiments/bounded_correction.py                       boosters, ~6 min
    ... --target inference_ms --folds artifacts/bounded-infer.pkl            the inference rows
    .venv/bin/python experiments/bounded_correction.py --gnn-groups 5 --folds artifacts/bounded-gnn.pkl
                                                                             the GNN recipe, ~30 min
    ... --constructed       also the multi-resolution nets built here, through the shipped predictor

RTX 3090 training steps (timm's labels, AMP fp16 + SGD momentum). The learned answer is either
the boosters' ensemble of the GPU recipe (XGBoost on the floor ratio, plain and on the relative
design: :func:`trappm_ray.evaluate.gpu.ensemble`), each of the 85 families held out alone, or the
shipped recipe (GNN + static MLP, one seed) on grouped family folds; the physics answer and the
bounds (:func:`trappm_ray.train.correction_fit.fit_bounds`) are fitted on the same training
families. Printed per answer: MAPE, median, p90, worst row, rows off by more than 50%, families
whose median is off by more than 1.5x; recall and false alarms of the out-of-domain signals for
the learned answer's errors above 50%; the 95% interval's coverage pooled and per family. Fold
answers are cached (``--folds``; the examples in ``--examples``).
"""
from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

import trappm_ray
from trappm_ray import devices
from trappm_ray.corpus import multires_models
from trappm_ray.evaluate.gpu import ensemble, family_groups, fit_predict, val_by_family
from trappm_ray.evaluate.gpu_gnn import GnnModel
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.correction import FLAG, QUANTILES, CorrectionBounds
from trappm_ray.model.launch import step_host_us
from trappm_ray.physics.kernel_classes import device_shares
from trappm_ray.physics.step_model import step_time
from trappm_ray.serving import routing
from trappm_ray.train.correction_fit import fit_bounds, step_rows
from trappm_ray.train import splits
from trappm_ray.train.gpu_examples import examples, graph_index

DEVICE = "rtx3090-amp"
MEMBERS = ("xgboost", "xgboost-rel")
LARGE = 0.5


def cached(path: str, build):
    if Path(path).exists():
        return pickle.loads(Path(path).read_bytes())
    out = build()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(pickle.dumps(out))
    return out


def physics(ex: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per example (one target's) the step model (ms, the shipped predictor's host figures) and class shares."""
    profiles = routing.load_predictor(None, "rtx3090").manifest.launch
    shares, step = step_rows(ex, graph_index("data/labels", ()), profiles)[ex[0]["target"]]
    return step, shares


def fold(ex: list[dict], train, val, test, seed: int, extra: dict | None = None) -> dict:
    """One split: the learned answer and 95% band for ``test``, and the rows physics may fit on."""
    if extra:
        fit = fit_predict(ex, train, val, test, "gnn", seed, extra)
    else:
        fit = ensemble(ex, val, test, {m: fit_predict(ex, train, val, test, m, seed) for m in MEMBERS})["ensemble"]
    return {"test": np.asarray(test), "seen": np.r_[train, val].astype(int), "pred": fit["pred"], "lo": fit["lo"],
            "hi": fit["hi"]}


def learned_folds(ex: list[dict], split: str, seed: int = 1337) -> list[dict]:
    """The boosters' ensemble: each family held out alone (``family``), or 30% of each family's
    architectures held out (``arch``, three seeds)."""
    if split == "arch":
        return [fold(ex, *splits.split(ex, "arch", s), s) for s in (seed, seed + 1, seed + 2)]
    out = []
    for k, family in enumerate(sorted({e["family"] for e in ex})):
        rest = np.array([i for i, e in enumerate(ex) if e["family"] != family])
        out.append(fold(ex, *val_by_family(ex, rest, seed), np.array([i for i, e in enumerate(ex) if e["family"] == family]), seed))
        if k % 20 == 0:
            print(f"{k + 1} families", flush=True)
    return out


def gnn_folds(ex: list[dict], aux: list[dict], groups: int, seeds: int, seed: int = 1337) -> list[dict]:
    """The shipped recipe (GNN + static MLP, :class:`~trappm_ray.evaluate.gpu_gnn.GnnModel`) on
    ``groups`` leave-families-out folds (:func:`~trappm_ray.evaluate.gpu.family_groups`), every
    family of a fold held out together."""
    gnn = GnnModel(ex, graph_index("data/labels", ()), 60, seeds, aux)
    jobs = []
    for held in family_groups(ex, groups):
        rest = np.array([i for i, e in enumerate(ex) if e["family"] not in held])
        jobs.append((*val_by_family(ex, rest, seed), np.array([i for i, e in enumerate(ex) if e["family"] in held]), seed))
    gnn.prefit(jobs)
    return [fold(ex, train, val, test, seed, {"gnn": gnn}) for train, val, test, _ in jobs]


def constructed(batch: int = 256) -> None:
    """The multi-resolution nets built here (:mod:`trappm_ray.corpus.multires_models`), which no
    label holds: the shipped predictor's networks alone, the step model, the physics answer and
    the product's answer (blended, bounded), RTX 3090 training step at ``batch``."""
    predictor = routing.load_predictor(None, "rtx3090")
    spec, manifest = devices.resolve("rtx3090"), predictor.manifest
    setting = {"precision": "amp-fp16", "optimizer": "sgd-momentum"}
    print(f"\n| net (batch {batch}) | networks alone | step model | physics | product | flagged |\n|---|---|---|---|---|---|")
    for width in multires_models.WIDTHS:
        for branches in multires_models.BRANCHES:
            model = multires_models.name(width, branches)
            graph = featurize(multires_models.export(model), batch)
            learned = predictor.predict_graphs([graph], [setting])[0]["train_step_ms"]
            step = step_time(graph, spec, setting, "train", step_host_us(manifest.launch)).total_ms
            bounds = CorrectionBounds.from_dict(manifest.correction["train_step_ms"])
            answer = trappm_ray.predict(multires_models.export(model), batch, "rtx3090")
            print(f"| {model} | {learned:.0f} ms | {step:.0f} ms | {step * bounds.physics(device_shares(graph, spec, 'amp-fp16')):.0f} ms "
                  f"| {answer.train_step_ms.value:.0f} ms | {'yes' if any('out of domain' in n for n in answer.notes) else 'no'} |")


def report(name: str, pred: np.ndarray, meas: np.ndarray, fams: np.ndarray) -> None:
    err = pred / meas - 1
    a = np.abs(err)
    by_family = pd.Series(np.log(pred / meas)).groupby(fams).median()
    worst = by_family.index[np.argmax(np.abs(by_family.values))]
    print(f"| {name} | {100 * a.mean():.1f}% | {100 * np.median(a):.1f}% | {100 * np.quantile(a, 0.9):.1f}% | "
          f"{100 * a.max():.0f}% | {int(np.sum(a > LARGE))} | {int(np.sum(np.abs(by_family.values) > np.log(1.5)))} "
          f"| {worst} {np.exp(by_family[worst]):.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", default="artifacts/gpu-examples-rtx3090.pkl")
    ap.add_argument("--folds", default="artifacts/bounded-folds.pkl", help="the fold answers' cache (one per target and learner)")
    ap.add_argument("--gnn-groups", type=int, default=0,
                    help="answer with the shipped recipe's GNN on this many grouped family folds (0: the boosters, each family alone)")
    ap.add_argument("--gnn-seeds", type=int, default=1)
    ap.add_argument("--quantiles", type=float, nargs=2, default=QUANTILES, help="the bounds' quantiles")
    ap.add_argument("--split", default="family", choices=("family", "arch"), help="for the boosters")
    ap.add_argument("--target", default="train_step_ms", choices=("train_step_ms", "inference_ms"))
    ap.add_argument("--constructed", action="store_true", help="also the multi-resolution nets built here")
    args = ap.parse_args()
    every = cached(args.examples, lambda: examples("data/labels", ["artifacts/corpus-gpu"], ("rtx3090-amp",))[0])
    ex = [e for e in every if e["slug"] == DEVICE and e["target"] == args.target]
    step, shares = cached(f"{args.examples}.{args.target}.physics", lambda: physics(ex))
    aux = [e for e in every if e["slug"] == ex[0]["slug"] and e["target"] != ex[0]["target"]]
    folds = cached(args.folds, lambda: gnn_folds(ex, aux, args.gnn_groups, args.gnn_seeds) if args.gnn_groups
                   else learned_folds(ex, args.split))
    meas = np.array([e["measured"] for e in ex])
    fams = np.array([e["family"] for e in ex])
    idx = np.concatenate([f["test"] for f in folds])  # a row may be tested by several seeds' splits
    meas, fams = meas[idx], fams[idx]
    learned, lo, hi = (np.concatenate([f[k] for f in folds]) for k in ("pred", "lo", "hi"))
    bound_lo, bound_hi, mid = (np.zeros(len(idx)) for _ in range(3))
    at = 0
    for f in folds:
        seen = f["seen"]  # the physics sees no row the learner did not
        bounds = fit_bounds(shares[seen], np.array([ex[i]["measured"] for i in seen]) / step[seen], args.quantiles)
        for i in f["test"]:
            bound_lo[at], bound_hi[at] = (step[i] * v for v in bounds.factors(shares[i]))
            mid[at] = step[i] * bounds.physics(shares[i])
            at += 1
    bounded = np.clip(learned, bound_lo, bound_hi)
    fired = (learned < bound_lo) | (learned > bound_hi)
    split = (f"{args.gnn_groups} grouped family folds" if args.gnn_groups else
             "30% of each family's architectures held out, 3 seeds" if args.split == "arch" else "each family held out alone")
    print(f"{DEVICE}/{args.target}: {len(ex)} rows, {len(set(fams))} families, {split}; {len(idx)} test rows\n")
    print("| answer | MAPE | median | p90 | worst row | rows > 50% | families' median > 1.5x off | worst family |")
    print("|---|---|---|---|---|---|---|---|")
    report("learned (" + ("the GNN recipe" if args.gnn_groups else "boosters' ensemble") + ")", learned, meas, fams)
    report("step model x median ratio", step[idx] * np.median(meas / step[idx]), meas, fams)
    report("physics: step model x class factors (median)", mid, meas, fams)
    report(f"learned, bounded by class ({100 * args.quantiles[0]:g}-{100 * args.quantiles[1]:g}%)", bounded, meas, fams)
    for w in (0.3, 0.5, 0.7):
        report(f"geometric blend, learned's share {w}", np.exp(w * np.log(learned) + (1 - w) * np.log(mid)), meas, fams)
    for t in (1.3, 1.5, 2.0):
        gated = np.where(np.abs(np.log(learned / mid)) > np.log(t), np.sqrt(learned * mid), learned)
        report(f"learned; beyond {t}x of physics the 0.5 blend", gated, meas, fams)
        report(f"the same, bounded by class", np.clip(gated, bound_lo, bound_hi), meas, fams)
    print("\n| signal | recall of learned errors > 50% | false alarms |\n|---|---|---|")
    large = np.abs(learned / meas - 1) > LARGE
    off = np.abs(np.log(learned / mid))
    shipped = fired | (off > FLAG)  # what the product calls out of domain
    for name, signal in (("bound hit", fired), *((f"learned / physics beyond {t}x either way", off > np.log(t))
                                                 for t in (1.3, 1.5, 2.0)), ("either (the product's flag)", shipped)):
        print(f"| {name} | {100 * signal[large].mean():.0f}% of {large.sum()} | {100 * signal[~large].mean():.1f}% |")
    # the interval: the band moved with the answer; where the bound holds the answer, the bounds
    scale = bounded / learned
    ilo = np.where(fired, np.minimum(lo * scale, bound_lo), lo * scale)
    ihi = np.where(fired, np.maximum(hi * scale, bound_hi), hi * scale)
    for name, (a, b) in (("learned band", (lo, hi)), ("bounded", (ilo, ihi))):
        cov = (meas >= a) & (meas <= b)
        per = pd.Series(cov).groupby(fams).mean()
        print(f"95% interval, {name}: pooled {100 * cov.mean():.1f}%, families within 90-98% "
              f"{100 * np.mean((per >= 0.9) & (per <= 0.98)):.0f}%, below 90% {100 * np.mean(per < 0.9):.0f}%, "
              f"median width x{np.median(b / a):.2f}")
    if args.constructed:
        constructed()


if __name__ == "__main__":
    main()
