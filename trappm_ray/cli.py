"""The ``trappm-ray`` command line.

    trappm-ray graph FILE.onnx --batch-size N [--feature-set v2] [--resolution R] [--json]

Bad input exits non-zero with one line on stderr naming the problem; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import errors


def _dims(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name or not value.isdigit():
            raise argparse.ArgumentTypeError(f"--dim expects NAME=INT, got '{item}'")
        out[name] = int(value)
    return out


def cmd_graph(args: argparse.Namespace) -> int:
    from . import features
    from .featurize import featurize

    fs = features.get(args.feature_set)
    graph = featurize(args.file, batch_size=args.batch_size, resolution=args.resolution,
                      dims=_dims(args.dim))
    x = features.node_features(graph, fs)
    report = {
        "file": args.file, "feature_set": fs.name, **graph.summary(),
        "node_features": list(x.shape), "static_features": features.static_features(graph, fs).tolist(),
        "unknown_ops": features.unknown_ops(graph, fs), **graph.meta,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:>28}: {v}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trappm-ray", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("graph", help="featurize an ONNX model and print its graph summary")
    g.add_argument("file")
    g.add_argument("--batch-size", type=int, default=1)
    g.add_argument("--resolution", type=int, default=None,
                   help="value for symbolic spatial dims of image inputs")
    g.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="value for a named symbolic input dimension (repeatable)")
    g.add_argument("--feature-set", default="v2", choices=["v1", "trappm-v1", "v2"])
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_graph)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except errors.ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (argparse.ArgumentTypeError, ValueError, OSError) as e:
        print(f"error: {e.__class__.__name__}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug must still be one line, not a traceback
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        print(f"error: internal ({e.__class__.__name__}): {first}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
