"""Dataclass configs from the command line: every field becomes a ``--flag`` (jobs stay thin)."""
from __future__ import annotations

import argparse
import dataclasses
import typing


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got '{text}'")


def parse_config(cls, argv: list[str] | None = None, description: str | None = None,
                 defaults=None):
    """Build ``cls`` (a dataclass) from ``--field value`` options; tuples take comma lists.

    ``defaults`` (an instance of ``cls``) replaces the class defaults, for presets.
    """
    parser = argparse.ArgumentParser(description=description)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        origin = typing.get_origin(hint)
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if origin is tuple:
            elem = args[0] if args else str
            conv = (lambda e: lambda s: tuple(e(x) for x in s.split(",") if x))(elem)
        elif hint is bool or args == [bool]:
            conv = _parse_bool
        elif args:  # Optional[X] / X | None
            conv = args[0]
        else:
            conv = hint
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory()
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=conv,
                            default=default, help=f"(default: {default!r})")
    return cls(**vars(parser.parse_args(argv)))
