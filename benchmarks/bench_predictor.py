"""The predictor a prediction benchmark times: the given one, or an untrained stand-in."""
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_predictor(predictor: str, random: bool) -> str:
    """``predictor`` as given, or (``random``) the path of a saved untrained predictor shaped
    like the trained recipe (encoder 128-64-64-64, 5 seeds, heads 64): timing only."""
    if not random:
        return predictor
    sys.path.insert(0, str(ROOT / "tests"))
    from predictor_builders import random_predictor

    path = tempfile.mkdtemp(prefix="bench-predictor-")
    random_predictor(seeds=(1, 2, 3, 4, 5), encoder_dims=(128, 64, 64, 64), hidden=64,
                     fc=64).save(path)
    return path
