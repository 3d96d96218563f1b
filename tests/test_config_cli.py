"""Dataclass configs from flags: optional tuples, none, presets."""
from dataclasses import dataclass

import pytest

from trappm_ray.config_cli import parse_config
from trappm_ray.presets import PRESETS, presets_for
from trappm_ray.train.pretrain import PretrainConfig


@dataclass
class Example:
    archs: tuple[str, ...] | None = None
    address: str | None = "auto"
    sizes: tuple[int, ...] = (1, 2)
    flag: bool = False
    cap: int | None = 3


def test_optional_tuple_splits_on_commas_not_characters():
    cfg = parse_config(Example, ["--archs", "resnet18,vit_tiny", "--sizes", "4,8", "--flag", "yes"])
    assert cfg.archs == ("resnet18", "vit_tiny") and cfg.sizes == (4, 8) and cfg.flag is True


def test_none_for_optional_fields():
    cfg = parse_config(Example, ["--address", "none", "--cap", "none"])
    assert cfg.address is None and cfg.cap is None
    assert parse_config(Example, ["--cap", "7"]).cap == 7


def test_bad_bool_is_a_usage_error():
    with pytest.raises(SystemExit):
        parse_config(Example, ["--flag", "maybe"])


def test_preset_sets_defaults_and_flags_override():
    presets = presets_for(PretrainConfig)
    cfg = parse_config(PretrainConfig, ["--preset", "gae-v1-cpu", "--epochs", "2"], presets=presets)
    assert cfg.name == "gae-v1-cpu" and cfg.feature_set == "trappm-v1" and cfg.epochs == 2
    assert parse_config(PretrainConfig, [], presets=presets) == PretrainConfig()
    with pytest.raises(SystemExit):
        parse_config(PretrainConfig, ["--preset", "nope"], presets=presets)


def test_every_preset_is_an_instance_of_its_config():
    assert all(isinstance(p, cls) for cls, named in PRESETS.items() for p in named.values())
