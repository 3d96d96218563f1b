"""Families nobody measured (issue 43): the RTX 3090 training step with families held out, the
learned, physics and shipped answers, the out-of-domain flag and per-family interval coverage:
docs/results-unseen.md and .json.

    .venv/bin/python jobs/evaluate_unseen.py        (boosters ~8 min; the GNN folds ~25 min on 2 cores)
    ... --target inference_ms --gnn-groups 0 --out docs/results-unseen-inference
``--gnn-encoder trappm_ray/predictors/default``: the same GNN folds once more with the networks
reading that predictor's pretrained encoder too (another ~25 min).
``--calibrate gnn`` (or ``boosters``) also stores the residuals of those folds' shipped answers
as the predictor's interval of the target (:func:`trappm_ray.evaluate.unseen.family_out_quantiles`).
Fold answers are cached under ``--cache`` (delete to refit); ``--seed`` another than the default
fits (and caches) the GNN folds again with other validation families and initialisation.
"""
import json
import logging
import pickle
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import trappm_ray
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import unseen
from trappm_ray.evaluate.report import command
from trappm_ray.evaluate.unseen_report import markdown
from trappm_ray.model.predictor import Predictor
from trappm_ray.model.stored import read_manifest, rewrite_manifest
from trappm_ray.ray_init import ensure_ray
from trappm_ray.train.gpu_examples import examples


@dataclass
class UnseenEvalConfig:
    labels: str = "data/labels"
    predictor: str = "trappm_ray/predictors/rtx3090-amp"  # its host figures; its bounds for the built nets
    cache: str = "artifacts/unseen"  # examples and fold answers, made once
    target: str = "train_step_ms"  # or inference_ms
    gnn_groups: int = 5  # 0: no GNN folds
    gnn_seeds: int = 1
    seed: int = 1337  # the GNN folds' validation families and initialisation (another: its own cached folds)
    out: str = "docs/results-unseen"  # .md and .json are written
    calibrate: str = ""  # "gnn" or "boosters": the predictor's interval of the target from these folds
    gnn_encoder: str = ""  # a predictor whose pretrained encoder a second set of GNN folds reads (issue 43 item 5)
    ray_cpus: int = 1  # GNN fits at once (two beside this process's examples overran 24 GB: Ray's OOM kill)


def cached(path: Path, build):
    if path.exists():
        return pickle.loads(path.read_bytes())
    value = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(value))
    return value


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(UnseenEvalConfig, description=__doc__)
    start, cache = time.time(), Path(cfg.cache)
    if cfg.gnn_groups:  # the GNN folds fit on Ray
        ensure_ray(None, cfg.ray_cpus or None)
    every = cached(cache / "examples.pkl", lambda: examples(cfg.labels, (), (unseen.DEVICE,))[0])  # the labels' own graphs
    ex = [e for e in every if e["slug"] == unseen.DEVICE and e["target"] == cfg.target]
    aux = [e for e in every if e["slug"] == unseen.DEVICE and e["target"] != cfg.target]
    manifest = read_manifest(cfg.predictor)
    step, shares = cached(cache / f"physics-{cfg.target}.pkl", lambda: unseen.physics_rows(ex, cfg.labels, manifest.launch))
    layout = cached(cache / f"layout-{cfg.target}.pkl", lambda: unseen.layout_of(ex, cfg.labels)) if manifest.layout else None
    runs = {"boosters": (None, lambda: unseen.booster_folds(ex))}

    seeded = "" if cfg.seed == UnseenEvalConfig.seed else f"-s{cfg.seed}"

    def fold_store(key: str):  # each GNN fold kept as it finishes: a stopped run resumes
        return lambda k, fit: cached(cache / f"folds-{cfg.target}-{key}-{cfg.gnn_groups}{seeded}-fold{k}.pkl", fit)
    if cfg.gnn_groups:
        runs["gnn"] = (cfg.gnn_groups, lambda: unseen.gnn_folds(ex, aux, cfg.labels, cfg.gnn_groups, cfg.gnn_seeds,
                                                                cfg.seed, kept=fold_store("gnn")))
    if cfg.gnn_groups and cfg.gnn_encoder:
        runs["gnn-pretrained"] = (cfg.gnn_groups, lambda: unseen.gnn_folds(
            ex, aux, cfg.labels, cfg.gnn_groups, cfg.gnn_seeds, cfg.seed, encoder=Predictor.load(cfg.gnn_encoder).encoder,
            kept=fold_store("gnn-pretrained")))
    cmd = command(asdict(cfg), "jobs/evaluate_unseen.py", UnseenEvalConfig)

    def fold_answers(key: str, groups: int | None, build) -> list[dict]:
        return cached(cache / f"folds-{cfg.target}-{key}-{groups or 0}{seeded if groups else ''}.pkl", build)
    folds = {key: unseen.answers(ex, fold_answers(key, groups, build), step, shares, layout)
             for key, (groups, build) in runs.items()}
    if cfg.calibrate:  # the shipped interval: the residuals of these folds' answers, families held out
        a = folds[cfg.calibrate]
        held, flag = unseen.held_answer(a)
        quantiles = {**manifest.residual_quantiles, cfg.target: {
            **unseen.family_out_quantiles(np.log(a.measured / held), flag, a.moved), "folds": cfg.calibrate,
            "command": cmd}}
        manifest = rewrite_manifest(cfg.predictor, manifest.replace(residual_quantiles=quantiles, intervals=unseen.INTERVALS))
        logging.info("%s: the %s interval now from families held out (%s folds)", cfg.predictor, cfg.target, cfg.calibrate)
    report = {"target": cfg.target, "rows": len(ex), "families": len({e["family"] for e in ex}),
              "interval": manifest.residual_quantiles[cfg.target].get("folds", "held-out architectures"), "splits": {}}
    for key, a in folds.items():
        answers = unseen.candidates(a, manifest.residual_quantiles[cfg.target])
        report["splits"][key] = {"groups": runs[key][0],
                                 "answers": {name: unseen.summary(a, *v) for name, v in answers.items()},
                                 "families": unseen.per_family(a, *answers["shipped: learned held within the class bounds"][:3]),
                                 "layouts": unseen.by_layout(a)}
    if cfg.target == unseen.TARGET:
        report["constructed"] = unseen.constructed(cfg.predictor, lambda onnx, b: trappm_ray.predict(onnx, b, "rtx3090"))
    text = markdown(report, cmd, time.time() - start)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps(report, indent=1))
    print(text)
