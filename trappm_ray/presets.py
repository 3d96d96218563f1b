"""Named presets: the configurations the Makefile, the demo and the docs run, in one place.

A job takes ``--preset NAME`` (``trappm_ray.config_cli.parse_config``); explicit flags still
override single fields. Presets reproduce the committed artifacts: ``make predictor`` is the
``labeled`` corpus, the ``gae-v2-cpu`` encoder and the ``ship`` regressors; ``make results`` adds
the ``gae-v1-cpu`` encoder and the ``results`` evaluation.
"""
from __future__ import annotations

from trappm_ray.corpus.build import DatasetConfig
from trappm_ray.evaluate.config import EvalConfig
from trappm_ray.train.build_predictor import RegressConfig
from trappm_ray.train.pretrain import PretrainConfig

# The corpus every labeled architecture joins; 49 min on the 2-core machine.
_CORPUS = "artifacts/corpus"
# The device the shipped CPU predictor and the committed CPU results are for.
_CPU_DEVICE = "intel-r-xeon-r-processor-t1"
# CPU-sized encoders (the paper's 1024-512-512-512 would take ~836 h here, benchmarks/README.md).
_CPU_ENCODER = dict(corpus=_CORPUS, storage="artifacts/pretrain", dims=(128, 64, 64, 64),
                    num_workers=1, cache=True)

PRESETS: dict[type, dict[str, object]] = {
    DatasetConfig: {
        "labeled": DatasetConfig(out=_CORPUS, labels="data/labels"),
        "demo": DatasetConfig(
            out="artifacts/demo/corpus",
            archs=("resnet18", "mobilenetv3_small_100", "efficientnet_b0", "vit_tiny_patch16_224",
                   "convnext_atto", "test_vit", "test_efficientnet"),
            resolutions=(64,), batch_sizes=(1, 2, 4, 8, 16, 32)),
    },
    PretrainConfig: {
        "gae-v2-cpu": PretrainConfig(name="gae-v2-cpu", max_graphs=8000, epochs=8, **_CPU_ENCODER),
        # the published baseline's encoder, on the committed joined graphs: no corpus build needed
        "gae-v1-cpu": PretrainConfig(name="gae-v1-cpu", feature_set="trappm-v1", max_graphs=4000,
                                     epochs=5, **{**_CPU_ENCODER, "corpus": "data/labels"}),
    },
    RegressConfig: {
        "ship": RegressConfig(device=_CPU_DEVICE, ship=True),
    },
    EvalConfig: {
        "results": EvalConfig(device=_CPU_DEVICE, arch_seeds=2, baseline_seeds=1,
                              split_targets=("train_step_ms", "train_memory_mb"),
                              finetune_source="trappm_ray/predictors/default",
                              finetune_to="intel-r-xeon-r-processor-t2"),
    },
}


def presets_for(cls: type) -> dict[str, object]:
    """The named presets of a config class (empty when it has none)."""
    return PRESETS.get(cls, {})


__all__ = ["PRESETS", "presets_for"]
