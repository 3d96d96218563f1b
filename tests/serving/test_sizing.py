"""GPU/MIG fit and the largest batch under a memory budget."""
import numpy as np
import pytest

from trappm_ray import errors
from trappm_ray.serving.sizing import fitting_profiles, largest_batch, runner_up


@pytest.mark.parametrize("memory_mb,a100_40,a100_80,h100,smallest", [
    (4000, "1g.5gb", "1g.10gb", "1g.10gb", "a100-pcie-40gb 1g.5gb"),
    (6000, "1g.10gb", "1g.10gb", "1g.10gb", "a30 1g.6gb"),  # A30's 6 GB slice beats a 10 GB one
    (15000, "3g.20gb", "1g.20gb", "1g.20gb", "p100-pcie-16gb"),  # a whole 16 GB GPU beats a slice
    (30000, "7g.40gb", "3g.40gb", "3g.40gb", "mi100"),
    (50000, None, "7g.80gb", "7g.80gb", "mi210"),
    (90000, None, None, None, "b200 3g.90gb"),
    (10**6, None, None, None, None),
])
def test_fitting_profiles(memory_mb, a100_40, a100_80, h100, smallest):
    profiles, best = fitting_profiles(memory_mb)
    assert (profiles["a100-sxm4-40gb"], profiles["a100-sxm4-80gb"], profiles["h100-sxm5-80gb"]) == \
        (a100_40, a100_80, h100)
    assert best == smallest


def test_every_mig_capable_gpu_is_listed():
    from trappm_ray import devices

    profiles, _ = fitting_profiles(1000)
    assert set(profiles) == {s.slug for s in devices.load_specs().values() if s.mig_capable}
    assert {"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb"} <= set(profiles)


def test_profile_boundary_is_strict():
    """DIPPM's rule is "< 5 GB": exactly 5 GB does not fit the 5 GB profile."""
    assert fitting_profiles(5 * 1024)[0]["a100-sxm4-40gb"] == "1g.10gb"
    assert fitting_profiles(5 * 1024 - 1)[0]["a100-sxm4-40gb"] == "1g.5gb"


@pytest.mark.parametrize("budget,want", [(333, 33), (10, 1), (5, 0), (1e9, 512), (5120, 512)])
def test_largest_batch(budget, want):
    seen = []

    def memory_at(b):  # 10 MB per sample
        seen.append(b)
        return 10.0 * b

    assert largest_batch(memory_at, budget, 512) == want
    assert len(seen) <= 2 * np.log2(512) + 1  # doubling + bisection, not a scan
    assert len(seen) == len(set(seen))  # each size computed once


def test_largest_batch_counts_a_refused_size_as_not_fitting():
    def memory_at(b):
        if b > 8:
            raise errors.UnresolvedShapes("refused")
        return 1.0

    assert largest_batch(memory_at, 100, 512) == 8


def test_runner_up_is_another_gpu_model():
    _, best = fitting_profiles(3000)
    nxt = runner_up(3000, best)
    assert best.startswith("a100") and nxt is not None and not nxt.startswith("a100")
    assert runner_up(3000, None) is None
