"""Predict every ONNX file and transformers config.json under SRC (directory or s3:// prefix);
parquet rows to DST (--parallel tp=2,pp=4 lays out every config).

    python jobs/batch_predict.py SRC DST [--predictor URI] [--batch-size 32] [--actors 2]
    python jobs/batch_predict.py models/ artifacts/predictions --batch-size 32
    python jobs/batch_predict.py s3://bucket/onnx s3://bucket/predictions --actors 4

One row per file (a bad file is an error row); re-running skips files already done.
Every field of trappm_ray.serving.batch.BatchPredictConfig is a --flag.
"""
import json
import sys
from dataclasses import asdict

from trappm_ray.serving.batch import BatchPredictConfig, run
from trappm_ray.config_cli import parse_config

if __name__ == "__main__":
    argv = sys.argv[1:]
    # SRC and DST may be given positionally, before any --flag.
    positional = []
    while argv and not argv[0].startswith("-") and len(positional) < 2:
        positional.append(argv.pop(0))
    argv = [x for name, value in zip(("--src", "--dst"), positional) for x in (name, value)] + argv
    summary = run(parse_config(BatchPredictConfig, argv, description=__doc__))
    print(json.dumps(asdict(summary), indent=1))
