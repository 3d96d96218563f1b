"""Splits: fractions per family, no leakage of architectures or families, seeded."""
import numpy as np
import pytest

from trappm_ray.train.splits import split


def _rows():
    rows = []
    for fam, n_arch in (("a", 6), ("b", 4), ("c", 3)):
        for k in range(n_arch):
            rows += [{"family": fam, "arch": f"{fam}{k}", "batch_size": b} for b in (1, 2, 4, 8, 16)]
    return rows


def _check_partition(rows, tr, va, te):
    assert len(set(tr) | set(va) | set(te)) == len(rows)
    assert not (set(tr) & set(va)) and not (set(tr) & set(te)) and not (set(va) & set(te))


def test_random_split_is_per_family_and_seeded():
    rows = _rows()
    tr, va, te = split(rows, "random", 1337)
    _check_partition(rows, tr, va, te)
    for fam in "abc":
        n = sum(r["family"] == fam for r in rows)
        assert abs(sum(rows[i]["family"] == fam for i in te) - 0.3 * n) <= 1
    assert all(np.array_equal(a, b) for a, b in zip(split(rows, "random", 1337), (tr, va, te)))
    assert not np.array_equal(split(rows, "random", 1338)[2], te)


def test_arch_split_keeps_architectures_whole():
    rows = _rows()
    tr, va, te = split(rows, "arch", 1337)
    _check_partition(rows, tr, va, te)
    side = {}
    for name, idx in (("tr", tr), ("va", va), ("te", te)):
        for i in idx:
            assert side.setdefault(rows[i]["arch"], name) == name
    assert {rows[i]["family"] for i in te} == {"a", "b", "c"}
    assert len(va) > 0


def test_family_split_holds_out_one_family():
    rows = _rows()
    tr, va, te = split(rows, "family", 1337, family="b")
    _check_partition(rows, tr, va, te)
    assert {rows[i]["family"] for i in te} == {"b"}
    assert "b" not in {rows[i]["family"] for i in np.concatenate([tr, va])}
    with pytest.raises(ValueError):
        split(rows, "family", 1337, family="zzz")


def test_none_split_has_no_test():
    rows = _rows()
    tr, va, te = split(rows, "none", 1)
    assert len(te) == 0 and len(va) > 0 and len(tr) + len(va) == len(rows)
