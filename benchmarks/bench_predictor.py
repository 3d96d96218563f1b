"""What the prediction benchmarks share: their common flags, the default input (a ResNet-101
skeleton at 224 px) and the predictor they time (the given one, or an untrained stand-in)."""
import argparse
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONNX = ROOT / "artifacts" / "bench" / "resnet101_224.onnx"


def add_common_args(ap: argparse.ArgumentParser, predictor: str | None = "default") -> None:
    """``--predictor`` (default ``predictor``), ``--random``, ``--onnx`` and ``--json``."""
    ap.add_argument("--predictor", default=predictor)
    ap.add_argument("--random", action="store_true", help="untrained predictor (timing only)")
    ap.add_argument("--onnx", default=str(ONNX))
    ap.add_argument("--json", default=None)


def resnet101(path: Path) -> Path:
    """``path``, first exported there from timm's ResNet-101 at 224 px when it is missing."""
    if not path.exists():
        from trappm_ray.corpus.zoo import export_skeleton

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(export_skeleton("resnet101", 224).onnx_bytes)
    return path


def bench_predictor(predictor: str, random: bool) -> str:
    """``predictor`` as given, or (``random``) the path of a saved untrained predictor shaped
    like the trained recipe (encoder 128-64-64-64, 5 seeds, heads 64): timing only."""
    if not random:
        return predictor
    from trappm_ray.train.build_predictor import random_predictor  # torch: on use

    path = tempfile.mkdtemp(prefix="bench-predictor-")
    random_predictor(seeds=(1, 2, 3, 4, 5), encoder_dims=(128, 64, 64, 64), hidden=64,
                     fc=64).save(path)
    return path
