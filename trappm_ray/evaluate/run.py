"""Honest evaluation: every model on the same splits and data, per family, as Ray tasks.

Writes ``<out>/results.json`` (split -> model -> target -> family -> MAPE, RMSE),
``<out>/results.md`` (per-family tables like the paper's Tables II-IV) and pred-vs-actual plots
under ``<out>/results/``. Random and held-out-architecture splits use the five published seeds,
the leave-one-family-out split one fold per family.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from dataclasses import asdict
from datetime import datetime, timezone

import numpy as np

from trappm_ray.model import predictor as P
from trappm_ray.evaluate.config import EvalConfig
from trappm_ray.evaluate.report import write_markdown
from trappm_ray.evaluate.baselines import STATIC_MODELS, fit_static_task, static_matrix
from trappm_ray.labels.datasheet import neighbour_errors
from trappm_ray.labels.examples import load_examples
from trappm_ray.labels.store import default_slug
from trappm_ray.train.pretrain import load_encoder
from trappm_ray.train.regressors import (RECIPES, embed, fit_task, for_target, mape, prepare,
                      random_encoder, recipe_with, rmse)
from trappm_ray.train.build_predictor import available_targets, data_hash
from trappm_ray.train.fanout import fan_out, share_graphs
from trappm_ray.train.splits import split

log = logging.getLogger(__name__)


def _instances(cfg: EvalConfig, families: list[str]) -> list[tuple[str, int, str | None]]:
    out = []
    for kind in cfg.splits:
        if kind == "family":
            out += [(kind, cfg.seeds[0], f) for f in families]
        else:
            out += [(kind, s, None) for s in (cfg.seeds[:cfg.arch_seeds] if kind == "arch" else cfg.seeds)]
    return out


def split_metrics(rows, y, preds: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Per family and mean over families; MAPE/RMSE averaged over the folds a family is in."""
    per = defaultdict(list)
    for idx, pred in preds:
        fams = np.array([rows[i]["family"] for i in idx])
        for fam in sorted(set(fams)):
            m = fams == fam
            per[fam].append((mape(pred[m], y[idx][m]), rmse(pred[m], y[idx][m]), int(m.sum())))
    fam = {f: {"mape": float(np.mean([v[0] for v in vs])), "rmse": float(np.mean([v[1] for v in vs])),
               "n": int(np.mean([v[2] for v in vs]))} for f, vs in per.items()}
    mean = {k: float(np.mean([v[k] for v in fam.values()])) for k in ("mape", "rmse")}
    return {"families": fam, "mean": mean}


def neighbour_summary(rows: list[dict], targets) -> dict:
    """Per target, the error of interpolating each row from its neighbouring batch sizes
    (:func:`~trappm_ray.labels.datasheet.neighbour_errors`): how irregular the labels themselves are."""
    out = {}
    for target in targets:
        err = neighbour_errors(rows, target)
        if len(err):
            out[target] = {"rows": len(err), "median": float(np.median(err)), "mean": float(err.mean())}
    return out


def load_prepared(labels: str, slug: str, targets, encoder: str):
    """What every regressor experiment starts from: ``(examples, prepared graphs, frozen
    encoder, encoder sidecar)`` for the v2 examples of ``slug``. The examples keep their rows
    and drop their raw graphs, which the prepared ones replace; the sidecar says how the encoder
    was pretrained."""
    ex = load_examples(labels, slug, "v2", targets)
    data = prepare(ex.data)
    ex.data = []
    enc, enc_meta = load_encoder(encoder)
    return ex, data, enc, enc_meta


def evaluate(cfg: EvalConfig) -> dict:
    """Run every (split instance, model, target) as a Ray task; write and return the results."""
    import ray

    from trappm_ray.ray_init import ensure_ray

    t0 = time.perf_counter()
    ensure_ray(cfg.ray_address)
    slug = cfg.device or default_slug(cfg.labels)
    targets = cfg.targets or available_targets(cfg.labels, slug)
    ex2, data2, enc, enc_meta = load_prepared(cfg.labels, slug, targets, cfg.encoder)
    encoders = {"v2": enc_meta}
    rows = ex2.rows
    # the graphs live in the object store from here on, shared by the tasks
    refs = {"x": ray.put(static_matrix(data2)), "emb:random": ray.put(embed(random_encoder(enc), data2)),
            "emb:none": None}
    refs["v2"], refs["emb:pretrained"] = share_graphs(data2, enc)
    del data2
    if "trappm-published" in cfg.models:
        # the published recipe drops out single nodes, so it cannot run on node classes
        data1 = prepare(load_examples(cfg.labels, slug, "trappm-v1", targets).data, classes=False)
        enc1, encoders["trappm-v1"] = load_encoder(cfg.encoder_v1)
        refs["trappm-v1"], refs["emb:v1"] = share_graphs(data1, enc1)
        del data1
    families = sorted({r["family"] for r in rows})
    calls, tests = {}, {}
    for kind, seed, fam in _instances(cfg, families):
        tr, va, te = split(rows, kind, seed, fam)
        models = cfg.models if kind == "random" else [m for m in cfg.models if m in cfg.split_models]
        if seed not in cfg.seeds[:cfg.baseline_seeds]:
            models = [m for m in models if m == "trappm-ray" or m in STATIC_MODELS]
        for target in targets:
            if kind != "random" and cfg.split_targets and target not in cfg.split_targets:
                continue
            y = ex2.column(target)
            ok = lambda idx: idx[np.isfinite(y[idx]) & (y[idx] > 0)]  # noqa: E731
            for model in models:
                if model == "analytic" and target != "train_memory_mb":
                    continue
                key = (kind, seed, fam, model, target)
                if model in STATIC_MODELS:
                    calls[key] = (fit_static_task, (refs["x"], y, ok(tr), ok(va), ok(te), model, seed), {})
                else:
                    rec = for_target(recipe_with(model, max_epochs=cfg.max_epochs or None), target)
                    emb = refs["emb:v1"] if rec.feature_set == "trappm-v1" else refs[f"emb:{rec.embedding}"]
                    calls[key] = (fit_task, (refs[rec.feature_set], y, emb, ok(tr), ok(va), ok(te), rec, seed), {})
                tests[key] = ok(te)
    log.info("%s: %d examples, %d fits", slug, len(rows), len(calls))
    done = defaultdict(list)
    seconds = defaultdict(float)
    for key, out in fan_out(calls, f"evaluating on {slug}").items():
        kind, _, _, model, target = key
        done[(kind, model, target)].append((tests[key], out["pred"]))
        seconds[(kind, model, target)] += out["seconds"]
    results: dict = {}
    for (kind, model, target), preds in sorted(done.items()):
        y = ex2.column(target)
        res = split_metrics(rows, y, preds)
        res["train_s"] = round(seconds[(kind, model, target)], 1)
        results.setdefault(kind, {}).setdefault(model, {})[target] = res
    report = {
        "meta": {"device": slug, "examples": len(rows), "architectures": len({r["arch"] for r in rows}),
                 "families": families, "targets": list(targets), "data_sha256_16": data_hash(cfg.labels, slug),
                 "code_version": P.code_version(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "wall_s": round(time.perf_counter() - t0, 1),
                 "neighbour_interpolation": neighbour_summary(rows, targets),
                 "config": {k: v for k, v in asdict(cfg).items() if k not in ("out", "ray_address")},
                 "recipes": {m: asdict(RECIPES[m]) for m in cfg.models if m in RECIPES},
                 "encoders": encoders},
        "results": results,
    }
    if cfg.finetune_to:
        from trappm_ray.train.finetune import finetune_markdown, finetune_table

        source = P.Predictor.load(cfg.finetune_source)
        table = finetune_table(source, cfg.labels, cfg.finetune_to)
        report["finetune"] = {"source": source.manifest.device.slug, "target": cfg.finetune_to,
                              "predictor": cfg.finetune_source, "table": table,
                              "markdown": finetune_markdown(table, source.manifest.device.slug,
                                                            cfg.finetune_to)}
    os.makedirs(cfg.out, exist_ok=True)
    with open(os.path.join(cfg.out, "results.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    plots = plot_pred_vs_actual(rows, ex2, done, targets, os.path.join(cfg.out, "results"))

    write_markdown(report, os.path.join(cfg.out, "results.md"), plots, cfg.out)
    return report


def plot_pred_vs_actual(rows, ex, done, targets, out_dir: str) -> list[str]:
    """One log-log scatter per target: trappm-ray on the random split, all seeds' test rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for target in targets:
        preds = done.get(("random", "trappm-ray", target))
        if not preds:
            continue
        y = ex.column(target)
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        fams = sorted({r["family"] for r in rows})
        for fam in fams:
            xs, ys = [], []
            for idx, pred in preds:
                m = np.array([rows[i]["family"] == fam for i in idx])
                if m.any():
                    xs += list(y[idx][m])
                    ys += list(pred[m])
            ax.scatter(xs, ys, s=6, label=fam)
        lo, hi = np.nanmin(y[y > 0]), np.nanmax(y)
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=f"measured {target}", ylabel=f"predicted {target}",
               title=f"trappm-ray, random split: {target}")
        ax.legend(fontsize=6, markerscale=2)
        fig.tight_layout()
        path = os.path.join(out_dir, f"pred_vs_actual_{target}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


__all__ = ["evaluate", "load_prepared", "split_metrics", "plot_pred_vs_actual"]
