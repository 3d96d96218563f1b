"""Adapt a trained predictor to a new device with the new device's labels, and register it.

Locally, the shipped CPU predictor fine-tuned on a second device's labels under data/labels:
    python jobs/finetune_predictor.py --device <slug>
On a cluster, after jobs/collect_labels.py ran on the new GPU type:
    ray job submit --working-dir . -- python jobs/finetune_predictor.py --ray-address auto \
        --labels s3://bucket/labels --device nvidia-l4 \
        --source s3://bucket/predictors/nvidia-a100/v0001 --registry s3://bucket/predictors
"""
import json

from trappm_ray.config_cli import parse_config
from trappm_ray.train.finetune import FinetuneConfig, finetune_predictor

if __name__ == "__main__":
    print(json.dumps(finetune_predictor(parse_config(FinetuneConfig, description=__doc__)), indent=1))
