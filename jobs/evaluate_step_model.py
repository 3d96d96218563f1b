"""The physics step model and the product against public measured batch sweeps (Pollux, Gavel),
precision pairs (ryujaehun), optimizer pairs (Zeus) and NeuSight's LMs on nine GPUs, each GPU
unseen: docs/results-step-model.md and .json.

    .venv/bin/python jobs/evaluate_step_model.py         (about 2 minutes on 2 cores)
"""
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import trappm_ray
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import batch_scaling, lm_gpus, power, setting_moves
from trappm_ray.evaluate.step_model_report import markdown


@dataclass
class StepModelEvalConfig:
    labels: str = "data/labels"
    cache: str = "artifacts/workloads"  # the sweeps' ONNX exports, made once
    out: str = "docs/results-step-model"  # .md and .json are written
    spec_predictor: str = "trappm_ray/predictors/gpu-spec"  # its manifest's leave-one-device-out figures


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
    lodo = json.loads((Path(cfg.spec_predictor) / "manifest.json").read_text())["boosters"]["lodo"]
    lm = lm_gpus.run(cfg.labels, lodo)
    text = markdown(batch, settings, "python jobs/evaluate_step_model.py", time.time() - start, lm)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps({"batch_scaling": batch, "setting_moves": settings,
                                                   "lm_gpus": lm}, indent=1))
    print(text)
