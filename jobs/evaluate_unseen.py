"""Families nobody measured (issue 43): the RTX 3090 training step with families held out, the
learned, physics and shipped answers, the out-of-domain flag and per-family interval coverage:
docs/results-unseen.md and .json.

    .venv/bin/python jobs/evaluate_unseen.py        (boosters ~8 min; the GNN folds ~60 min on 2 cores)
    ... --target inference_ms --gnn-groups 0 --out docs/results-unseen-inference
Fold answers are cached under ``--cache`` (delete to refit).
"""
import json
import logging
import pickle
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import trappm_ray
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import unseen
from trappm_ray.evaluate.report import command
from trappm_ray.evaluate.unseen_report import markdown
from trappm_ray.model.intervals import quantile_offsets
from trappm_ray.model.stored import read_manifest
from trappm_ray.train.gpu_examples import examples


@dataclass
class UnseenEvalConfig:
    labels: str = "data/labels"
    predictor: str = "trappm_ray/predictors/rtx3090-amp"  # its host figures; its bounds for the built nets
    cache: str = "artifacts/unseen"  # examples and fold answers, made once
    target: str = "train_step_ms"  # or inference_ms
    gnn_groups: int = 5  # 0: no GNN folds
    gnn_seeds: int = 1
    out: str = "docs/results-unseen"  # .md and .json are written


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
    every = cached(cache / "examples.pkl", lambda: examples(cfg.labels, (), (unseen.DEVICE,))[0])  # the labels' own graphs
    ex = [e for e in every if e["slug"] == unseen.DEVICE and e["target"] == cfg.target]
    aux = [e for e in every if e["slug"] == unseen.DEVICE and e["target"] != cfg.target]
    manifest = read_manifest(cfg.predictor)
    step, shares = cached(cache / f"physics-{cfg.target}.pkl", lambda: unseen.physics_rows(ex, cfg.labels, manifest.launch))
    band = quantile_offsets(manifest.residual_quantiles, cfg.target, 1.96)  # the shipped 95% band
    runs = {"boosters": (None, lambda: unseen.booster_folds(ex))}
    if cfg.gnn_groups:
        runs["gnn"] = (cfg.gnn_groups, lambda: unseen.gnn_folds(ex, aux, cfg.labels, cfg.gnn_groups, cfg.gnn_seeds))
    report = {"target": cfg.target, "rows": len(ex), "families": len({e["family"] for e in ex}), "splits": {}}
    for key, (groups, build) in runs.items():
        a = unseen.answers(ex, cached(cache / f"folds-{cfg.target}-{key}-{groups or 0}.pkl", build), step, shares)
        answers = unseen.candidates(a, band)
        report["splits"][key] = {"groups": groups,
                                 "answers": {name: unseen.summary(a, *v) for name, v in answers.items()},
                                 "families": unseen.per_family(a, *answers["shipped: learned held within the class bounds"][:3])}
    if cfg.target == unseen.TARGET:
        report["constructed"] = unseen.constructed(cfg.predictor, lambda onnx, b: trappm_ray.predict(onnx, b, "rtx3090"))
    text = markdown(report, command(asdict(cfg), "jobs/evaluate_unseen.py", UnseenEvalConfig), time.time() - start)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps(report, indent=1))
    print(text)
