"""Evaluate every model on the same splits and regenerate docs/results.md and docs/results.json.

    python jobs/evaluate.py
Quicker, the random split and the static baselines only:
    python jobs/evaluate.py --splits random --models trappm-ray,mlp,xgboost,analytic
Needs the encoders of jobs/pretrain_gae.py (--encoder, --encoder-v1); every fit is a Ray task.
"""
from trappm_ray.config_cli import parse_config
from trappm_ray.presets import presets_for
from trappm_ray.evaluate.config import EvalConfig
from trappm_ray.evaluate.run import evaluate

if __name__ == "__main__":
    report = evaluate(parse_config(EvalConfig, description=__doc__, presets=presets_for(EvalConfig)))
    for kind, by_model in report["results"].items():
        for model, by_target in by_model.items():
            cells = ", ".join(f"{t} {r['mean']['mape']:.1f}%" for t, r in by_target.items())
            print(f"{kind:7s} {model:17s} {cells}")
    print(f"wall {report['meta']['wall_s']:.0f} s -> docs/results.md, docs/results.json")
