"""Fit what a GPU predictor's step model reads from its labels, the host's time per kernel
(trappm_ray/model/launch.py), the correction bounds (how far its learned answers may stand from the
step model, by kind of kernel: trappm_ray/model/correction.py) and its channels-last factors (the
NHWC / NCHW step per kind of kernel: trappm_ray/model/layout.py), and store them in its manifest,
its networks untouched.

    python jobs/fit_correction.py --uri trappm_ray/predictors/rtx3090-amp --device rtx3090-amp
``python jobs/train_gpu_predictor.py`` stores the same after training.
"""
import json

from trappm_ray.config_cli import parse_config
from trappm_ray.train.gpu_predictor import LabelsOfPredictor, write_correction

if __name__ == "__main__":
    print(json.dumps(write_correction(parse_config(LabelsOfPredictor, description=__doc__)), indent=1))
