"""Test MAPE of variants of the shipped regressor recipe against the recipe itself, same splits.

    .venv/bin/python experiments/recipe_variants.py [--target train_step_ms] [--seeds 1337,1338]
        [--split random] [--variants "hidden=128,fc=256;huber_delta=0.2"] [--ensemble 1]
        [--by-load] [--json PATH]

Each variant is ``field=value`` overrides of :class:`~trappm_ray.train.regressors.Recipe` joined by
commas; variants are separated by semicolons. Every (variant, seed) is one Ray task fitting the
regressor on the seed's split of the device with the most labels (the evaluation's split: 70:30
per family, 15% of the rest for validation), so the baseline and the variants see the same rows.
Prints per variant the test MAPE (mean over families, as ``docs/results.md`` reports it) per
seed, its mean, the ratio to the baseline's mean, and the mean fit time. With ``--ensemble K``
each (variant, seed) also fits K-1 more regressors on the same split with other initialisations
(init seeds ``seed + 100 k``) and is scored on the mean of the K predictions, as the shipped
predictor averages its heads; the single-model MAPE is printed beside it. ``--by-load`` also
splits each variant's test rows by the load their label was measured under (quiet: 1-minute load
average at most the measurement's threads + 0.5) and prints MAPE and median signed error of each
part: a model fitted on mostly loaded rows over-predicts the quiet ones.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import fields, replace

import numpy as np

DEFAULT_VARIANTS = "huber_delta=0.2;hidden=128,fc=256;hidden=128,fc=256,huber_delta=0.2;lr=1e-3,max_epochs=120,patience=20"


def parse_variant(text: str, types: dict) -> dict:
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, value = item.split("=")
        out[key] = types[key](value)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", default="data/labels")
    p.add_argument("--target", default="train_step_ms")
    p.add_argument("--seeds", default="1337,1338")
    p.add_argument("--split", default="random")
    p.add_argument("--variants", default=DEFAULT_VARIANTS)
    p.add_argument("--ensemble", type=int, default=1)
    p.add_argument("--by-load", action="store_true")
    p.add_argument("--json", default="")
    args = p.parse_args()

    from trappm_ray.evaluate.run import load_prepared, split_metrics
    from trappm_ray.labels.store import default_slug, measured_busy, ok_labels
    from trappm_ray.ray_init import ensure_ray
    from trappm_ray.train.build_predictor import DEFAULT_ENCODER
    from trappm_ray.train.fanout import fan_out, share_graphs
    from trappm_ray.train.regressors import RECIPES, Recipe, fit_task, for_target
    from trappm_ray.train.splits import split

    types = {f.name: {"int": int, "float": float, "bool": lambda v: v == "True", "str": str}[f.type]
             for f in fields(Recipe)}
    base = for_target(RECIPES["trappm-ray"], args.target)
    variants = {"baseline": base} | {v: replace(base, **parse_variant(v, types))
                                     for v in args.variants.split(";") if v.strip()}
    seeds = [int(s) for s in args.seeds.split(",")]
    ensure_ray(None)
    slug = default_slug(args.labels)
    ex, data, enc, _ = load_prepared(args.labels, slug, (args.target,), DEFAULT_ENCODER)
    quiet_at = {(r["arch"], r["resolution"], r["batch_size"]): not measured_busy(r)
                for r in ok_labels(args.labels, slug).to_pylist()}
    quiet = np.array([quiet_at[(r["arch"], r["resolution"], r["batch_size"])] for r in ex.rows])
    y = ex.column(args.target)
    data_ref, emb_ref = share_graphs(data, enc)
    del data
    calls, tests = {}, {}
    for seed in seeds:
        tr, va, te = split(ex.rows, args.split, seed)
        for name, rec in variants.items():
            tests[(name, seed)] = te
            for k in range(args.ensemble):
                calls[(name, seed, k)] = (fit_task, (data_ref, y, emb_ref, tr, va, te, rec, seed + 100 * k), {})
    fitted = fan_out(calls, "recipe variants")
    score = lambda te, pred: split_metrics(ex.rows, y, [(te, pred)])["mean"]["mape"]  # noqa: E731
    out = {}
    for (name, seed), te in tests.items():
        rs = [fitted[(name, seed, k)] for k in range(args.ensemble)]
        r = out.setdefault(name, {"mape": {}, "single": {}, "seconds": []})
        pred = np.mean([x["pred"] for x in rs], 0)
        r["mape"][seed] = score(te, pred)
        r["single"][seed] = score(te, rs[0]["pred"])
        r["seconds"] += [x["seconds"] for x in rs]
        err = pred / y[te] - 1
        for part, m in (("quiet", quiet[te]), ("loaded", ~quiet[te])):
            if not m.any():  # e.g. a set measured entirely quietly has no loaded part
                continue
            r.setdefault(part, []).append((100 * np.abs(err[m]).mean(), 100 * np.median(err[m]), int(m.sum())))
    ref_mean = np.mean(list(out["baseline"]["mape"].values()))
    print(f"{args.target}, {args.split} split, {len(ex)} examples; test MAPE % (mean over families)")
    if args.ensemble > 1:
        print(f"ensembles of {args.ensemble} initialisations; 'single' = the first one alone")
    print(f"{'variant':48s} " + " ".join(f"{s:>7d}" for s in seeds) + "    mean  ratio  single  fit s")
    for name, r in out.items():
        mean = np.mean(list(r["mape"].values()))
        print(f"{name:48s} " + " ".join(f"{r['mape'][s]:7.2f}" for s in seeds)
              + f" {mean:7.2f} {mean / ref_mean:6.3f} {np.mean(list(r['single'].values())):7.2f}"
              + f" {np.mean(r['seconds']):6.0f}")
    if args.by_load:
        print("by the load each test label was measured under: MAPE % (mean over rows), median signed"
              " error %, rows (per seed)")
        for name, r in out.items():
            print(f"{name:48s} " + "  ".join(
                f"{part} {np.mean([v[0] for v in r[part]]):5.1f} {np.mean([v[1] for v in r[part]]):+5.1f}"
                f" {'/'.join(str(v[2]) for v in r[part])}" for part in ("quiet", "loaded") if part in r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "split": args.split, "examples": len(ex), "results": out},
                      f, indent=1)


if __name__ == "__main__":
    main()
