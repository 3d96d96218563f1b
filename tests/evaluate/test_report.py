"""docs/results.md names the exact command that regenerates it."""
from dataclasses import asdict, replace

from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate.config import EvalConfig
from trappm_ray.train.pretrain import PretrainConfig
from trappm_ray.evaluate.report import command, regenerate_lines


def _as_json(cfg: EvalConfig) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}


def test_command_lists_only_the_non_default_fields():
    assert command(_as_json(EvalConfig())) == "python jobs/evaluate.py"
    cfg = replace(EvalConfig(), baseline_seeds=1, splits=("random", "arch"))
    assert command(_as_json(cfg)) == "python jobs/evaluate.py --splits random,arch --baseline-seeds 1"


def test_command_reads_the_config_as_evaluate_passes_it():
    cfg = replace(EvalConfig(), arch_seeds=2, split_targets=("train_step_ms",))
    assert command(asdict(cfg)) == command(_as_json(cfg)) == \
        "python jobs/evaluate.py --arch-seeds 2 --split-targets train_step_ms"


def test_command_round_trips_through_the_job_parser():
    cfg = replace(EvalConfig(), arch_seeds=2, split_targets=("train_step_ms", "train_memory_mb"))
    argv = command(_as_json(cfg)).split()[2:]
    assert parse_config(EvalConfig, argv) == cfg


def test_regenerate_lines_rebuild_corpus_and_encoders_from_their_sidecars():
    v2 = replace(PretrainConfig(), name="gae-v2-cpu", dims=(128, 64), epochs=8, max_graphs=8000,
                 cache=True)
    sidecar = {"config": asdict(v2), "dims": [128, 64], "epoch": 8, "max_graphs": 8000}
    meta = {"config": asdict(replace(EvalConfig(), arch_seeds=2)),
            "encoders": {"v2": sidecar, "trappm-v1": {"dims": [64], "epoch": 5, "max_graphs": 40}}}
    lines = regenerate_lines(meta)
    assert lines[1] == "python jobs/build_dataset.py --out artifacts/corpus --labels data/labels"
    assert lines[2] == ("python jobs/pretrain_gae.py --dims 128,64 --epochs 8 --name gae-v2-cpu "
                        "--max-graphs 8000 --cache true")
    assert lines[3].startswith("# trappm-v1 encoder: its sidecar does not record")
    assert lines[4] == "python jobs/evaluate.py --arch-seeds 2"
    assert parse_config(PretrainConfig, lines[2].split()[2:]) == v2


def test_an_encoder_pretrained_on_the_joined_graphs_needs_no_corpus_build():
    v1 = replace(PretrainConfig(), name="gae-v1-cpu", corpus="data/labels", feature_set="trappm-v1")
    meta = {"config": asdict(EvalConfig()), "encoders": {"trappm-v1": {"config": asdict(v1)}}}
    lines = regenerate_lines(meta)
    assert not any("build_dataset" in line for line in lines)
    assert "--corpus data/labels" in lines[1]
