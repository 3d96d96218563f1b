"""A small, randomly initialised Predictor (and encoder) for tests that need one without training."""
import json

import torch

from trappm_ray.graph import features
from trappm_ray.model.networks import GraphEncoder, Regressor
from trappm_ray.model.predictor import Predictor, Scaler


def random_predictor(targets=("train_step_ms", "train_memory_mb", "inference_ms"), seeds=(1, 2),
                     feature_set: str = "v2", encoder_dims=(16, 8), hidden: int = 8, fc: int = 8,
                     seed: int = 0, batch_affine=("train_memory_mb",)) -> Predictor:
    """Untrained heads with plausible scaling (outputs of the order of 100 units)."""
    torch.manual_seed(seed)
    fs = features.get(feature_set)
    encoder = GraphEncoder(fs.node_dim, encoder_dims, 0.0) if encoder_dims else None
    emb = encoder.out_dim if encoder is not None else 0
    heads = {t: [Regressor(fs.node_dim, fs.static_dim, emb, hidden, fc, 0.0, node_dropout=False,
                           batch_affine=t in batch_affine) for _ in seeds] for t in targets}
    for t in batch_affine:
        for head in heads.get(t, ()):
            head.set_target_scale(0.1, 1.0)
    scalers = {t: [Scaler(torch.zeros(fs.static_dim), torch.ones(fs.static_dim), torch.zeros(emb),
                          torch.ones(emb), 4.6, 0.1) for _ in seeds] for t in targets}
    manifest = {"name": "random", "feature_set": fs.name, "targets": list(targets),
                "seeds": list(seeds),
                "head": {"hidden": hidden, "fc": fc, "dropout": 0.0, "node_dropout": False,
                         "batch_affine": list(batch_affine)},
                "encoder": ({"in_dim": fs.node_dim, "dims": list(encoder_dims), "dropout": 0.0}
                            if encoder is not None else None),
                "device": {"slug": "test-device", "name": "test"}}
    return Predictor(manifest, encoder, heads, scalers)


def save_encoder(path, in_dim: int, feature_set: str) -> str:
    """An untrained tiny encoder saved as ``<path>/encoder.pt`` + its sidecar; its path."""
    enc = GraphEncoder(in_dim, (8, 4), 0.0)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(enc.state_dict(), path / "encoder.pt")
    (path / "encoder.json").write_text(json.dumps(
        {"feature_set": feature_set, "in_dim": in_dim, "dims": [8, 4], "dropout": 0.0}))
    return str(path / "encoder.pt")
