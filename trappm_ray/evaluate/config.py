"""What an evaluation run covers: the one config shared by the run and its report."""
from __future__ import annotations

from dataclasses import dataclass

from trappm_ray.train.build_predictor import DEFAULT_ENCODER
from trappm_ray.train.regressors import SEEDS

MODELS = ("trappm-ray", "trappm-published", "nnlqp", "random-encoder", "mlp", "xgboost", "analytic")


@dataclass
class EvalConfig:
    """What to evaluate.

    Args:
        labels, device: label directory and device slug (empty = the one with most labels).
        encoder: pretrained v2 encoder; encoder_v1: pretrained trappm-v1 encoder (published recipe).
        targets: empty = every target the device has.
        models: models on the random split; split_models: those also run on ``arch`` and
            ``family`` splits (the GNN ablations are costly on CPU).
        splits: any of random, arch, family.
        seeds: seeds of the random and arch splits (family: one fold per family, first seed).
        baseline_seeds: the GNN baselines and ablation (published, nnlqp, random-encoder) run
            with the first N seeds only: each GNN fit costs minutes on CPU.
        arch_seeds: the held-out-architecture split uses the first N seeds.
        split_targets: targets evaluated on the arch and family splits (empty = all).
        max_epochs: cap the GNN recipes' epochs (0 = recipe default).
        out: directory for results.json, results.md and plots.
        ray_address: an existing cluster; None = ``RAY_ADDRESS`` or a private local one.
        finetune_to: a second device's slug under ``labels``: adds the fine-tuning table
            (``finetune_source``, a registered predictor of the first device, fine-tuned to it).
    """

    labels: str = "data/labels"
    device: str = ""
    encoder: str = DEFAULT_ENCODER
    encoder_v1: str = "artifacts/pretrain/gae-v1-cpu/encoder.pt"
    targets: tuple[str, ...] = ()
    models: tuple[str, ...] = MODELS
    split_models: tuple[str, ...] = ("trappm-ray", "mlp", "xgboost", "analytic")
    splits: tuple[str, ...] = ("random", "arch", "family")
    seeds: tuple[int, ...] = SEEDS
    baseline_seeds: int = 2
    arch_seeds: int = 5
    split_targets: tuple[str, ...] = ()
    max_epochs: int = 0
    out: str = "docs"
    ray_address: str | None = None
    finetune_to: str = ""
    finetune_source: str = ""
