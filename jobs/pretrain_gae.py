"""Pretrain the TraPPM graph auto-encoder on the unlabeled corpus (Ray Train, DDP).

Local, small (2 CPU workers sharing a 2-core machine with Ray Data):
    python jobs/pretrain_gae.py --corpus artifacts/corpus --storage artifacts/pretrain \
        --name gae-small --dims 128,64 --epochs 5 --max-graphs 500 --cpus-per-worker 0.5
Paper sizes (1024,512,512,512; 400 epochs) on a GPU cluster, checkpoints and encoder on S3
(RAY_AUTH_MODE=token in the submitting shell when the cluster uses token auth):
    ray job submit --working-dir . -- python jobs/pretrain_gae.py \
        --corpus s3://bucket/corpus --storage s3://bucket/pretrain --name gae-v2 \
        --num-workers 4 --ray-address auto
The CPU encoders the shipped predictor and the results use: --preset gae-v2-cpu / gae-v1-cpu.
Re-running the same command (same --storage and --name) resumes from the last epoch; raising
--epochs continues a finished run. The encoder lands in <storage>/<name>/encoder.pt (+ .json).
S3 settings come from AWS_* variables; on a cluster, give them to the job with
--runtime-env-json '{"env_vars": {"AWS_ENDPOINT_URL": "..."}}' if the nodes lack them.
"""
import json
from dataclasses import asdict

from trappm_ray.config_cli import parse_config
from trappm_ray.presets import presets_for
from trappm_ray.train.pretrain import PretrainConfig, pretrain

if __name__ == "__main__":
    result = pretrain(parse_config(PretrainConfig, description=__doc__, presets=presets_for(PretrainConfig)))
    print(json.dumps(asdict(result), indent=1))
