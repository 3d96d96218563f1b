"""Build the unlabeled graph corpus (timm -> ONNX skeletons -> graphs) with Ray tasks.

Full corpus (~30k graphs, resumable; re-run the same command to continue):
    python jobs/build_dataset.py --out artifacts/corpus
On a cluster, to S3:
    ray job submit --working-dir . -- python jobs/build_dataset.py --out s3://bucket/corpus
Small demo:
    python jobs/build_dataset.py --out artifacts/demo/corpus --archs resnet18,vit_tiny_patch16_224 --resolutions 64
"""
import json
from dataclasses import asdict

from trappm_ray.config_cli import parse_config
from trappm_ray.presets import presets_for
from trappm_ray.corpus.build import DatasetConfig, build

if __name__ == "__main__":
    summary = build(parse_config(DatasetConfig, description=__doc__, presets=presets_for(DatasetConfig)))
    print(json.dumps(asdict(summary), indent=1))
