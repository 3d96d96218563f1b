"""The physics power model against Zeus's measured power (leave one GPU out, leave one workload
out): docs/results-power.md and .json; refits the shipped weights (trappm_ray/data/power_model.json).

    .venv/bin/python jobs/evaluate_power.py       (about 2 minutes; reads data/labels-power and data/labels)
"""
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import power
from trappm_ray.evaluate.power_report import markdown
from trappm_ray.physics.power import FITTED


@dataclass
class PowerEvalConfig:
    power_labels: str = power.LABELS  # Zeus's rows (jobs/import_labels.py --sources zeus) and their graphs
    labels: str = "data/labels"  # the GPU campaign's rows with measured power ("": not checked)
    out: str = "docs/results-power"  # .md and .json are written
    write_weights: bool = True  # refit trappm_ray/data/power_model.json


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(PowerEvalConfig, description=__doc__)
    start = time.time()
    result = power.run(cfg.power_labels, labels_dir=cfg.labels or None)
    text = markdown(result, time.time() - start)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps(result, indent=1))
    if cfg.write_weights:
        FITTED.write_text(json.dumps(result["fitted"], indent=1) + "\n")
    print(text)
