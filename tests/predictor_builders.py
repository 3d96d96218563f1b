"""A small, randomly initialised Predictor (and encoder) for tests that need one without training."""
import json

import torch

from trappm_ray.model.networks import GraphEncoder
from trappm_ray.train.build_predictor import random_predictor  # noqa: F401 - the tests' builder


def save_encoder(path, in_dim: int, feature_set: str) -> str:
    """An untrained tiny encoder saved as ``<path>/encoder.pt`` + its sidecar; its path."""
    enc = GraphEncoder(in_dim, (8, 4), 0.0)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(enc.state_dict(), path / "encoder.pt")
    (path / "encoder.json").write_text(json.dumps(
        {"feature_set": feature_set, "in_dim": in_dim, "dims": [8, 4], "dropout": 0.0}))
    return str(path / "encoder.pt")
