"""All-reduce time against vTrain's measured tables and data-parallel step time against Pollux's
placements: docs/results-distributed.md and .json.

    .venv/bin/python jobs/evaluate_distributed.py      (about a minute; needs ../shared/data/public-distributed)
"""
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import data_parallel
from trappm_ray.evaluate.batch_scaling import workload_onnx


@dataclass
class DistributedEvalConfig:
    cache: str = "artifacts/workloads"  # the workloads' ONNX exports, made once
    out: str = "docs/results-distributed"  # .md and .json are written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(DistributedEvalConfig, description=__doc__)
    start = time.time()
    tables = data_parallel.allreduce_tables()
    dp = data_parallel.pollux(lambda w: workload_onnx(w, Path(cfg.cache)))
    text = data_parallel.markdown(tables, dp, time.time() - start)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps({"allreduce": tables, "pollux": dp["summary"]}, indent=1))
    print(text)
