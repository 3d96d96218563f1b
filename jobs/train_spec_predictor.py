"""Train the spec-based predictor (any GPU from its spec entry) on every GPU's labels and write the
shipped predictor directory trappm_ray/predictors/gpu-spec/ (boosters as XGBoost JSON + manifest).

    python jobs/train_spec_predictor.py
    python jobs/train_spec_predictor.py --variants full,physics,relative --depths 4,6 --out /tmp/gpu-spec
Examples are the GPU evaluation's (trappm_ray/evaluate/gpu.py): label rows under --labels joined to
data/labels/graphs.parquet (plus --corpora). Variant x depth are chosen by leave-one-device-out
MAPE, whose residuals also make the intervals. Every leave-one-device-out fit is a Ray task
(--parallel false: in this process); --ray-address joins a cluster.
"""
import json

from trappm_ray.config_cli import parse_config
from trappm_ray.train.spec_predictor import SpecTrainConfig, train_spec_predictor

if __name__ == "__main__":
    print(json.dumps(train_spec_predictor(parse_config(SpecTrainConfig, description=__doc__)), indent=1))
