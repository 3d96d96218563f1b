"""The default corpus selection: which timm architectures a grid build exports."""
from __future__ import annotations

import numpy as np


def select_architectures(other_per_family: int = 2) -> list[str]:
    """Every paper-family architecture plus an even spread of ``other_per_family`` from the rest."""
    from trappm_ray.corpus import zoo

    chosen, by_family = [], {}
    for arch in zoo.list_architectures():
        by_family.setdefault(zoo.family_of(arch), []).append(arch)
    for fam, archs in sorted(by_family.items()):
        if fam in zoo.PAPER_FAMILIES:
            chosen += archs
        elif other_per_family > 0:
            idx = np.linspace(0, len(archs) - 1, min(other_per_family, len(archs))).round()
            chosen += [archs[int(i)] for i in dict.fromkeys(idx)]
    return sorted(chosen)


def interleave_families(archs: list[str]) -> list[str]:
    """Round-robin over families, so that a partial build is balanced across them."""
    from trappm_ray.corpus import zoo

    by_family: dict[str, list[str]] = {}
    for a in archs:
        by_family.setdefault(zoo.family_of(a), []).append(a)
    queues = list(by_family.values())
    out = []
    while queues:
        out += [q.pop(0) for q in queues]
        queues = [q for q in queues if q]
    return out


__all__ = ["interleave_families", "select_architectures"]
