"""Dataclass configs from the command line: every field becomes a ``--flag`` (jobs stay thin)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import typing


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got '{text}'")


def _converter(hint):
    """str -> value for a field type; ``X | None`` takes ``none`` (or nothing) for None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if type(None) in typing.get_args(hint):  # Optional[X] / X | None: convert as X
        inner = _converter(args[0] if len(args) == 1 else str)
        return lambda s: None if s.lower() in ("", "none", "null") else inner(s)
    if typing.get_origin(hint) is tuple:
        elem = args[0] if args else str
        return lambda s: tuple(elem(x) for x in s.split(",") if x)
    if hint is bool:
        return _parse_bool
    return hint


def parse_config(cls, argv: list[str] | None = None, description: str | None = None,
                 defaults=None, presets: dict | None = None):
    """Build ``cls`` (a dataclass) from ``--field value`` options; tuples take comma lists,
    optional fields take ``none``.

    Args:
        cls: the config dataclass.
        argv: the arguments (None = ``sys.argv[1:]``).
        description: the job's help text.
        defaults: an instance of ``cls`` whose values replace the class defaults.
        presets: name -> instance of ``cls``; ``--preset NAME`` then picks the defaults.

    The job calling this also gets the library's INFO log lines on stderr (unless logging is
    already set up).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if presets:
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--preset", choices=sorted(presets))
        chosen, argv = pre.parse_known_args(argv)
        if chosen.preset:
            defaults = presets[chosen.preset]
    parser = argparse.ArgumentParser(description=description)
    if presets:
        parser.add_argument("--preset", choices=sorted(presets),
                            help="named defaults (trappm_ray/presets.py); flags override fields")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory()
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=_converter(hints[f.name]),
                            default=default, help=f"(default: {default!r})")
    values = vars(parser.parse_args(argv))
    values.pop("preset", None)
    return cls(**values)
