"""Train a shipped GPU predictor (the physics-informed GNN) on one device's labels, every
target x seed as a Ray task, and register it (``--ship true``: also into trappm_ray/predictors/).

    python jobs/train_gpu_predictor.py --device rtx3090-amp --ship true
    python jobs/train_gpu_predictor.py --device rtx3090-amp --seeds 1337 --max-epochs 5 --registry /tmp/reg
Label rows under --labels join data/labels/graphs.parquet (plus --corpora); --ray-address joins a
cluster.
"""
import json

from trappm_ray.config_cli import parse_config
from trappm_ray.train.gpu_predictor import GpuPredictorConfig, train_gpu_predictor

if __name__ == "__main__":
    print(json.dumps(train_gpu_predictor(parse_config(GpuPredictorConfig, description=__doc__)), indent=1))
