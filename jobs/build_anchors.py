"""Rewrite the measurements stored beside a GPU predictor (``anchors.parquet``: what reference
transfer moves for a graph the labels measured), its networks untouched.

    python jobs/build_anchors.py --uri trappm_ray/predictors/rtx3090-amp --device rtx3090-amp
``python jobs/train_gpu_predictor.py`` writes the same file after training.
"""
import json

from trappm_ray.config_cli import parse_config
from trappm_ray.train.gpu_predictor import LabelsOfPredictor, write_anchors

if __name__ == "__main__":
    print(json.dumps(write_anchors(parse_config(LabelsOfPredictor, description=__doc__)), indent=1))
