"""The physics step model and the product against public measured batch sweeps (Pollux, Gavel),
precision pairs (ryujaehun) and optimizer pairs (Zeus): docs/results-step-model.md and .json.

    .venv/bin/python jobs/evaluate_step_model.py         (about 2 minutes on 2 cores)
"""
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import trappm_ray
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import batch_scaling, power, setting_moves
from trappm_ray.evaluate.step_model_report import markdown


@dataclass
class StepModelEvalConfig:
    labels: str = "data/labels"
    cache: str = "artifacts/workloads"  # the sweeps' ONNX exports, made once
    out: str = "docs/results-step-model"  # .md and .json are written


def product_ms(onnx_bytes: bytes, batch: int, dims: dict, device: str, precision: str, optimizer: str) -> float:
    """The product's training step time (what `trappm-ray predict` answers); NaN for a batch it
    refuses (above 4,096)."""
    try:
        p = trappm_ray.predict(onnx_bytes, batch, device, dims=dims or None, precision=precision, optimizer=optimizer)
    except ValueError:
        return float("nan")
    return p.train_step_ms.value


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(StepModelEvalConfig, description=__doc__)
    start = time.time()
    sweeps = batch_scaling.one_gpu_sweeps()
    batch = batch_scaling.run(sweeps, Path(cfg.cache), answer=product_ms)
    zeus = power.zeus_rows()
    settings = setting_moves.run(cfg.labels, zeus, power.row_graphs(power.LABELS, zeus))
    text = markdown(batch, settings, "python jobs/evaluate_step_model.py", time.time() - start)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps({"batch_scaling": batch, "setting_moves": settings}, indent=1))
    print(text)
