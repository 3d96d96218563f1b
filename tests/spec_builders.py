"""A tiny spec-based predictor trained in seconds on hand-built rows (real roofline features of
tiny ONNX graphs on a few spec-table GPUs; synthetic times = floor x a device efficiency)."""
import numpy as np

import onnx_builders as B
from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.device_features import feature_vector, roofline_features, settings
from trappm_ray.train.spec_predictor import host_base

SPECS = {"rtx3090": 1.5, "titan-v": 2.5, "t4": 2.0, "a100-sxm4-40gb": 3.0}  # slug -> efficiency


def tiny_table() -> dict:
    """Rows of ``trappm_ray.train.spec_predictor.table`` form: 3 tiny models x 3 batches x 2
    targets x the devices of ``SPECS``."""
    graphs = [(f"{name}{b}", name, featurize(model, batch_size=b)) for name, model in
              (("cnn", B.cnn_model()), ("gelu", B.layernorm_gelu_model()), ("tf", B.transformer_block()))
              for b in (2, 8, 32)]
    cols = {k: [] for k in ("x", "measured", "floor", "spec", "kind", "target", "family", "arch", "slug")}
    rng = np.random.default_rng(0)
    for slug, eff in SPECS.items():
        spec = devices.get(slug)
        for arch, family, graph in graphs:
            for target, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
                s = settings(mode == "train", "amp-fp16")
                floor, feats = roofline_features(graph, spec, "amp-fp16", mode,
                                                 "sgd-momentum" if mode == "train" else "none", s)
                for k, v in (("x", feature_vector(feats, spec, s)), ("floor", floor), ("spec", slug),
                             ("measured", floor * eff * float(np.exp(rng.normal(0, 0.03)))),
                             ("kind", spec.kind), ("target", target), ("family", family),
                             ("arch", arch), ("slug", f"{slug}-amp")):
                    cols[k].append(v)
    out = {k: np.array(v) for k, v in cols.items()}
    out["x"] = out["x"].astype(np.float64)
    out["base"] = host_base(out)
    return out


def train_tiny(out: str, variants=("full", "physics"), depths=(2,)) -> dict:
    """Train and write a tiny spec predictor at ``out``; the training summary."""
    from trappm_ray.train.spec_predictor import SpecTrainConfig, train_from_table

    cfg = SpecTrainConfig(out=out, variants=variants, depths=depths, rounds=30, nthread=1, parallel=False)
    return train_from_table(tiny_table(), cfg)
