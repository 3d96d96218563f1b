"""The main job end to end on embedded defaults: a small graph corpus built locally with Ray.

    make demo        (or: .venv/bin/python jobs/demo.py [--out artifacts/demo/corpus])
"""
import json
from dataclasses import asdict

from trappm_ray.config_cli import parse_config
from trappm_ray.dataset import DatasetConfig, build

DEMO = DatasetConfig(
    out="artifacts/demo/corpus",
    archs=("resnet18", "mobilenetv3_small_100", "efficientnet_b0", "vit_tiny_patch16_224",
           "convnext_atto", "test_vit", "test_efficientnet"),
    resolutions=(64,), batch_sizes=(1, 2, 4, 8, 16, 32),
)

if __name__ == "__main__":
    cfg = parse_config(DatasetConfig, description=__doc__, defaults=DEMO)
    summary = build(cfg)
    print(json.dumps(asdict(summary), indent=1))
