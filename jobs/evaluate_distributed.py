"""Multi-GPU evaluation: all-reduce time against vTrain's measured tables, data-parallel step time
against Pollux's placements and Gavel's K80/P100 runs (leave-one-GPU-out), and NeuSight's 4-GPU
GPT-2 runs through the public Python call, and ryujaehun's nn.DataParallel scaling (measured, not
answered): docs/results-distributed.md and .json.

    .venv/bin/python jobs/evaluate_distributed.py      (about a minute; rows from data/labels-distributed and
    data/labels, the all-reduce tables from ../shared/data/public-distributed/vtrain/trace)
"""
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import trappm_ray
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate import data_parallel, multi_gpu
from trappm_ray.evaluate.batch_scaling import workload_onnx


@dataclass
class DistributedEvalConfig:
    cache: str = "artifacts/workloads"  # the workloads' ONNX exports, made once
    out: str = "docs/results-distributed"  # .md and .json are written


def neusight_ms(row: dict) -> float:
    """One NeuSight 4-GPU row through the public call, in its setting (fp32, no optimizer step)."""
    p = trappm_ray.predict(row["config"], batch_size=row["micro_batch"], device=row["device"],
                           gpus=row["gpus"], parallel=row["parallel"], global_batch=row["global_batch"],
                           precision="fp32", optimizer="none")
    return p.train_step_ms.value


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(DistributedEvalConfig, description=__doc__)
    start = time.time()
    onnx_of = lambda w: workload_onnx(w, Path(cfg.cache))  # noqa: E731
    tables = data_parallel.allreduce_tables()
    dp = data_parallel.pollux(onnx_of)
    gv = multi_gpu.gavel(onnx_of)
    ns = multi_gpu.neusight(neusight_ms)
    dpar = multi_gpu.dataparallel_scaling()
    text = data_parallel.markdown(tables, dp, time.time() - start) + multi_gpu.markdown(gv, ns, dpar)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps(
        {"allreduce": tables, "pollux": dp["summary"], "gavel": gv["summary"],
         "neusight": {k: ns[k] for k in ("mape", "worst")} | {"rows": [{k: r[k] for k in (
             "device", "model", "parallel", "micro_batch", "global_batch", "measured_ms", "predicted_ms")}
             for r in ns["rows"]]}, "dataparallel": dpar}, indent=1))
    print(text)
