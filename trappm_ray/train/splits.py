"""Train / validation / test splits of labeled examples.

* ``random``: the published protocol: within each family, 30% of the rows go to test; the same
  architecture at other batch sizes stays in train, so this measures interpolation.
* ``arch``: within each family, 30% of the *architectures* go to test with all their rows.
* ``family``: leave one family out: all of its rows are the test set.
Validation (epoch and hyper-parameter choice) is carved from the training side the same way the
test set was (rows for ``random``, whole architectures otherwise), never from the test set.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

SPLITS = ("random", "arch", "family")


def _take(groups: dict, fraction: float, rng: np.random.Generator) -> tuple[list, list]:
    """Split each list of ``groups`` (family -> items), ``fraction`` of every list to the second
    part (at least one item when the list has two or more)."""
    keep, take = [], []
    for fam in sorted(groups):
        items = list(groups[fam])
        rng.shuffle(items)
        n = int(round(len(items) * fraction))
        n = min(max(n, 1 if len(items) >= 2 else 0), len(items) - 1) if len(items) > 1 else 0
        take += items[:n]
        keep += items[n:]
    return keep, take


def _by(keys: list, families: list, idx) -> dict:
    groups = defaultdict(set)
    for i in idx:
        groups[families[i]].add(keys[i])
    return {f: sorted(v) for f, v in groups.items()}


def split(rows: list[dict], kind: str, seed: int, family: str | None = None,
          test: float = 0.3, val: float = 0.15) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train, val, test)`` example indices.

    Args:
        rows: examples with ``family`` and ``arch``.
        kind: ``random``, ``arch`` or ``family`` (then ``family`` names the held-out one);
            ``none`` puts nothing in test (fitting the shipped predictor).
        seed: shuffling seed.
        test, val: fractions for the test set and for validation out of the rest.
    """
    rng = np.random.default_rng(seed)
    fams = [r["family"] for r in rows]
    all_idx = list(range(len(rows)))
    unit = list(range(len(rows))) if kind in ("random", "none") else [r["arch"] for r in rows]
    if kind == "family":
        if family not in set(fams):
            raise ValueError(f"no rows of family {family!r}")
        test_units = {unit[i] for i in all_idx if fams[i] == family}
    elif kind in ("random", "arch"):
        test_units = set(_take(_by(unit, fams, all_idx), test, rng)[1])
    elif kind == "none":
        test_units = set()
    else:
        raise ValueError(f"unknown split {kind!r}; expected one of {SPLITS} or 'none'")
    rest = [i for i in all_idx if unit[i] not in test_units]
    val_units = set(_take(_by(unit, fams, rest), val, rng)[1])
    pick = lambda cond: np.array([i for i in all_idx if cond(i)], dtype=np.int64)  # noqa: E731
    return (pick(lambda i: unit[i] not in test_units and unit[i] not in val_units),
            pick(lambda i: unit[i] in val_units and unit[i] not in test_units),
            pick(lambda i: unit[i] in test_units))


__all__ = ["SPLITS", "split"]
