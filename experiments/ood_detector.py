"""Which signal tells a large error (> 50%) on a family nobody measured, before anyone runs it?

    .venv/bin/python experiments/ood_detector.py [examples.pkl]     (about 10 minutes on 2 cores)

Leave one family out, each family alone, on the RTX 3090's training steps (timm's labels,
AMP fp16 + SGD momentum): the learned models of the GPU predictor's recipe that fit in minutes
(XGBoost on the floor ratio, plain and on the relative design, and one efficiency per device
over the roofline) are fitted on the other families (15% of them validating) and answer the
held-out one; the answer is their ensemble (:func:`trappm_ray.evaluate.gpu.ensemble`). Per
held-out row, three signals, each with a threshold set on the validation families only:

* ``domain``: the shipped check (:mod:`trappm_ray.model.domain`): distance of the graph-level
  static vector to the nearest training graph over the 95th percentile of held-out-family
  distances;
* ``disagree``: how far the learned members' answers spread (max/min), over its 85th percentile
  on the validation rows;
* ``physics``: how far the learned answer sits from the roofline with the training rows' median
  efficiency (|log(ensemble / roofline-eff)|), over its 85th percentile on the validation rows.

Printed: recall of large errors and false-alarm rate among the others for each signal and for
any of them, pooled over families; a learned detector (``meta``: boosted trees on the three
signals and the graph's features, predicting a large error, trained on the other families'
held-out rows, its threshold at 15% false alarms on them; the other families' errors come from
folds whose training saw the family tested, a leak this experiment accepts); and the 95%
interval's coverage per family (its share of families within 90-98%). ``examples.pkl``: :func:`trappm_ray.train.gpu_examples.examples` rows,
pickled (built from ``data/labels`` when absent: 6-7 minutes).
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import xgboost as xgb

from trappm_ray.evaluate.gpu import ensemble, fit_predict, val_by_family
from trappm_ray.graph.features import V2_STATIC
from trappm_ray.model.domain import assess, fit_domain
from trappm_ray.train.gpu_examples import examples, graph_index

TASK = "rtx3090-amp/train_step_ms"
MEMBERS = ("xgboost", "xgboost-rel")
LARGE = 0.5  # an error above 50% is what the signal has to catch
QUANTILE = 0.85


def load(path: str) -> list[dict]:
    if Path(path).exists():
        return pickle.loads(Path(path).read_bytes())
    ex, _ = examples("data/labels", ["artifacts/corpus-gpu"], [], graph_index("data/labels", ["artifacts/corpus-gpu"]))
    Path(path).write_bytes(pickle.dumps(ex))
    return ex


def fold(ex: list[dict], family: str, seed: int = 1337) -> dict:
    """One held-out family: its rows' errors, signals and interval hits."""
    rest = np.array([i for i, e in enumerate(ex) if e["family"] != family])
    test = np.array([i for i, e in enumerate(ex) if e["family"] == family])
    train, val = val_by_family(ex, rest, seed)  # 15% of the other families validate
    fits = {m: fit_predict(ex, train, val, test, m, seed) for m in (*MEMBERS, "roofline-eff")}
    ens = ensemble(ex, val, test, {m: fits[m] for m in MEMBERS})["ensemble"]
    meas = np.array([ex[i]["measured"] for i in test])
    dom = fit_domain(np.stack([ex[i]["x"][:len(V2_STATIC)] for i in train]), [ex[i]["family"] for i in train])
    domain = np.array([assess(dom, ex[i]["x"][:len(V2_STATIC)])["distance"] / dom["threshold"] for i in test])

    def spread(rows: str) -> np.ndarray:
        logs = np.log([fits[m][rows] for m in MEMBERS])
        return logs.max(0) - logs.min(0)

    def off_physics(rows: str) -> np.ndarray:
        members = np.mean(np.log([fits[m][rows] for m in MEMBERS]), 0)
        return np.abs(members - np.log(fits["roofline-eff"][rows]))

    disagree = spread("raw") / max(np.quantile(spread("val_raw"), QUANTILE), 1e-9)
    physics = off_physics("raw") / max(np.quantile(off_physics("val_raw"), QUANTILE), 1e-9)
    return {"family": family, "error": np.abs(ens["pred"] / meas - 1), "domain": domain, "disagree": disagree,
            "physics": physics, "covered": (meas >= ens["lo"]) & (meas <= ens["hi"])}


def detector(folds: list[dict], name: str) -> tuple[float, float, int]:
    large = np.concatenate([f["error"] > LARGE for f in folds])
    fired = np.concatenate([f[name] > 1.0 for f in folds]) if name != "any" else \
        np.concatenate([(f["domain"] > 1) | (f["disagree"] > 1) | (f["physics"] > 1) for f in folds])
    return float(fired[large].mean()) if large.any() else float("nan"), float(fired[~large].mean()), int(large.sum())


def meta(ex: list[dict], folds: list[dict]) -> tuple[float, float]:
    """(recall, false alarms) of the learned detector, each family judged by one trained on the others."""
    x, y, fam = [], [], []
    for f in folds:
        rows = [e for e in ex if e["family"] == f["family"]]
        for j, e in enumerate(rows):
            x.append(np.r_[f["domain"][j], f["disagree"][j], f["physics"][j], e["x"]])
            y.append(f["error"][j] > LARGE)
            fam.append(f["family"])
    x, y, fam = np.array(x, np.float64), np.array(y), np.array(fam)
    fired = np.zeros(len(y), bool)
    for family in sorted(set(fam)):
        train, test = fam != family, fam == family
        model = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.05, "subsample": 0.8,
                           "seed": 0, "verbosity": 0}, xgb.DMatrix(x[train], label=y[train].astype(float)), 200)
        seen = model.predict(xgb.DMatrix(x[train]))
        fired[test] = model.predict(xgb.DMatrix(x[test])) > np.quantile(seen[~y[train]], QUANTILE)
    return float(fired[y].mean()), float(fired[~y].mean())


def main() -> None:
    ex = [e for e in load(sys.argv[1] if len(sys.argv) > 1 else "artifacts/gpu-examples.pkl")
          if f"{e['slug']}/{e['target']}" == TASK]
    families = sorted({e["family"] for e in ex})
    folds = []
    for k, family in enumerate(families):
        folds.append(fold(ex, family))
        if k % 20 == 0:
            print(f"{k + 1}/{len(families)} families", flush=True)
    err = np.concatenate([f["error"] for f in folds])
    print(f"{TASK}: {len(err)} rows, {len(families)} families held out one at a time; ensemble MAPE "
          f"{100 * err.mean():.1f}%, median {100 * np.median(err):.1f}%, rows above {100 * LARGE:.0f}%: {np.sum(err > LARGE)}")
    print("| signal | recall of large errors | false alarms |\n|---|---|---|")
    for name in ("domain", "disagree", "physics", "any"):
        recall, false, n = detector(folds, name)
        print(f"| {name} | {100 * recall:.0f}% of {n} | {100 * false:.0f}% |")
    recall, false = meta(ex, folds)
    print(f"| meta | {100 * recall:.0f}% | {100 * false:.0f}% |")
    cover = np.array([f["covered"].mean() for f in folds])
    sizes = np.array([len(f["covered"]) for f in folds])
    print(f"95% interval: pooled coverage {100 * np.concatenate([f['covered'] for f in folds]).mean():.1f}%; "
          f"families within 90-98%: {np.mean((cover >= 0.9) & (cover <= 0.98)) * 100:.0f}% "
          f"(below 90%: {np.mean(cover < 0.9) * 100:.0f}%, of families with 5+ rows: "
          f"{np.mean(cover[sizes >= 5] < 0.9) * 100:.0f}%)")
    worst = sorted(folds, key=lambda f: -f["error"].mean())[:5]
    print("worst families: " + ", ".join(f"{f['family']} {100 * f['error'].mean():.0f}% (domain fired on "
                                         f"{100 * np.mean(f['domain'] > 1):.0f}%, disagree {100 * np.mean(f['disagree'] > 1):.0f}%, "
                                         f"physics {100 * np.mean(f['physics'] > 1):.0f}%)" for f in worst))


if __name__ == "__main__":
    main()
