"""Behaviour pinned: every shipped predictor's answers on the sample models at three batch sizes,
and the spec-based GPUs', as tests/data/golden_answers.json holds them (tests/golden.py writes it).

Numbers match to a relative 1e-5: float32 networks on another CPU (AVX2 against AVX-512 kernels)
may differ in their last bits, and a real change of answer is far larger."""
import json
import math

from golden import GOLDEN, answers

RTOL = 1e-5


def close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12)
    return a == b


def test_close_tells_a_moved_number():
    assert close({"a": [1.0, {"b": 2.0}]}, {"a": [1.0 + 1e-7, {"b": 2.0}]})
    assert not close({"a": [1.0, {"b": 2.0}]}, {"a": [1.0, {"b": 2.001}]})
    assert not close({"a": 1.0}, {"a": 1.0, "b": None})


def test_every_shipped_predictor_answers_as_pinned():
    with open(GOLDEN) as fh:
        want = json.load(fh)
    got = json.loads(json.dumps(answers()))  # through JSON, as the file was written
    assert sorted(got) == sorted(want)
    moved = [k for k in want if not close(got[k], want[k])]
    assert moved == [], f"{len(moved)} answers moved, e.g. {moved[:3]}: if on purpose, rerun tests/golden.py"
