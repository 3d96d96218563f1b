"""Which architectures the CPU label collection measures by default, and its cached plan."""
from __future__ import annotations

import json
import logging

from trappm_ray import storage

log = logging.getLogger(__name__)

# Non-paper families sampled by the default plan: diverse designs that build at 64 px.
PLAN_OTHER_FAMILIES = ("regnet", "resnext", "rexnet", "ghostnet", "dla", "deit", "edgenext",
                       "lcnet", "mixnet", "repvgg")

def coverage_order(items: list) -> list:
    """Reorder a size-sorted list so every prefix spans it: both ends, then repeated midpoints."""
    if len(items) <= 2:
        return list(items)
    order, queue = [0, len(items) - 1], [(0, len(items) - 1)]
    while queue:
        lo, hi = queue.pop(0)
        if hi - lo > 1:
            order.append((lo + hi) // 2)
            queue += [(lo, (lo + hi) // 2), ((lo + hi) // 2, hi)]
    return [items[i] for i in order]


def default_plan(resolution: int = 64, max_params: int = 60_000_000, per_family: int = 15,
                 per_other_family: int = 3, other_families=PLAN_OTHER_FAMILIES) -> list[str]:
    """Architectures to label, ordered round-robin across families, paper families first.

    Per family: the archs that build at ``resolution`` with <= ``max_params`` parameters (a
    family with none, like vgg, keeps its 2 smallest), ``per_family`` of them (``per_other_family``
    for other families) picked evenly over the parameter-count range, then ordered so that any
    prefix spans small to large. Costs ~0.1 s per candidate (meta-device model creation).
    """
    from trappm_ray.corpus import zoo

    def pick(fam: str, n: int) -> list[str]:
        sized = []
        for arch in zoo.list_architectures((fam,)):
            try:
                sized.append((zoo.count_params(arch, resolution), arch))
            except Exception:  # noqa: BLE001 - does not build at this resolution
                continue
        sized.sort()
        small = [s for s in sized if s[0] <= max_params] or sized[:2]
        k = min(n, len(small))
        idx = sorted({round(i * (len(small) - 1) / max(k - 1, 1)) for i in range(k)})
        return coverage_order([small[i][1] for i in idx])

    plan = []
    for fams, n in ((zoo.PAPER_FAMILIES, per_family), (tuple(other_families), per_other_family)):
        groups = [pick(f, n) for f in fams]
        plan += [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]
    return plan


def cached_plan(out: str, resolution: int, max_params: int, per_family: int,
                per_other_family: int, other_families) -> list[str]:
    """The default plan, cached in ``<out>/plan.json`` for the same plan settings."""
    settings = dict(resolution=resolution, max_params=max_params, per_family=per_family,
                    per_other_family=per_other_family, other_families=list(other_families))
    uri = storage.join(out, "plan.json")
    if storage.exists(uri):
        cached = json.loads(storage.read_bytes(uri))
        if cached["settings"] == settings:
            return cached["archs"]
    log.info("planning architectures (meta-device parameter counts, ~1.5-3 min) ...")
    archs = default_plan(**settings)
    storage.write_bytes(uri, json.dumps({"settings": settings, "archs": archs}, indent=1).encode())
    return archs


