"""The main job end to end on embedded defaults: build a small graph corpus with Ray, predict the
bundled sample models into parquet with the shipped predictor, and print one report per device:
the CPU predictor, the RTX 3090's (trained on its measured steps) and an H100 (no labels: the
RTX 3090's answer moved by the roofline, see docs/predict.md).

    make demo        (or: .venv/bin/python jobs/demo.py [--out artifacts/demo/corpus])
"""
import json
from dataclasses import asdict

from trappm_ray import cli
from trappm_ray.serving.batch import BatchPredictConfig, run
from trappm_ray.config_cli import parse_config
from trappm_ray.corpus.build import DatasetConfig, build
from trappm_ray.presets import presets_for
SAMPLES = "data/sample/onnx"  # one small architecture per family, exported at 64 px
PREDICTIONS = "artifacts/demo/predictions"

if __name__ == "__main__":
    cfg = parse_config(DatasetConfig, description=__doc__, defaults=presets_for(DatasetConfig)["demo"])
    print(json.dumps(asdict(build(cfg)), indent=1))
    summary = run(BatchPredictConfig(src=SAMPLES, dst=PREDICTIONS, batch_size=32))
    print(json.dumps(asdict(summary), indent=1))
    for device in (None, "rtx3090", "h100-sxm5-80gb"):
        print()
        cli.main(["predict", f"{SAMPLES}/resnet10t@64.onnx", "--batch-size", "32"]
                 + (["--device", device] if device else []))
