"""Train the per-target x per-seed regressors on one device's labels (Ray tasks) and register
the predictor.

Locally, on the committed CPU labels, with the encoder from jobs/pretrain_gae.py:
    python jobs/train_regressors.py --encoder artifacts/pretrain/gae-v2-cpu/encoder.pt
Refresh the joined graphs after new labels first (needs the corpus of jobs/build_dataset.py):
    python jobs/train_regressors.py --join-corpus artifacts/corpus
On a cluster, registry on S3:
    ray job submit --working-dir . -- python jobs/train_regressors.py --ray-address auto \
        --labels s3://bucket/labels --encoder s3://bucket/pretrain/gae-v2/encoder.pt \
        --registry s3://bucket/predictors
Add --ship to make the result the package's default predictor.
"""
import json

from trappm_ray.config_cli import parse_config
from trappm_ray.presets import presets_for
from trappm_ray.train.build_predictor import RegressConfig, train_predictor

if __name__ == "__main__":
    print(json.dumps(train_predictor(parse_config(RegressConfig, description=__doc__, presets=presets_for(RegressConfig))), indent=1))
