"""docs/results.md names the exact command that regenerates it."""
from dataclasses import asdict, replace

from trappm_ray.evaluate import EvalConfig
from trappm_ray.results_doc import command


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
    from trappm_ray.config_cli import parse_config

    cfg = replace(EvalConfig(), arch_seeds=2, split_targets=("train_step_ms", "train_memory_mb"))
    argv = command(_as_json(cfg)).split()[2:]
    assert parse_config(EvalConfig, argv) == cfg
