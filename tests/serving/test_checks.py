"""Plain-words flags of impossible answers: ``trappm_ray.serving.checks.absurdities``."""
from __future__ import annotations

from trappm_ray.serving.checks import YEAR_MS, absurdities


def test_costs_no_training_job_has_are_flagged_in_words():
    assert absurdities(10.0, 500.0, 2.0) == []
    assert absurdities(None, None, None) == [] and absurdities(10.0, None, None) == []
    assert "years" in absurdities(3 * YEAR_MS, None)[0]
    assert "cannot be trained as given" in absurdities(1.0, 1e12)[0]


def test_inference_slower_than_a_training_step_is_flagged():
    flags = absurdities(5.0, None, 7.5)
    assert len(flags) == 1 and "slower than a training step" in flags[0] and "7.5 ms" in flags[0]
    assert absurdities(5.0, None, 5.0) == []


def test_time_floor_is_the_roofline_or_the_host_issue_time_whichever_is_larger():
    import onnx_builders as B

    from trappm_ray import devices
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.physics.floors import LEAST_HOST_US_PER_KERNEL, time_floors_ms
    from trappm_ray.physics.roofline import roofline

    spec = devices.get("h100-sxm5-80gb")
    which = set()
    for batch in (1, 65536):
        graph = featurize(B.cnn_model(), batch_size=batch)
        floors = time_floors_ms(graph, {"spec": spec.slug}, "fp32", "adam")
        for target, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
            est = roofline(graph, spec, "fp32", mode, "adam")
            host = max(est.kernels, 1) * LEAST_HOST_US_PER_KERNEL[target] / 1e3
            assert floors[target] == max(est.total_ms, host) > 0
            which.add("roofline" if est.total_ms > host else "host")
    assert which == {"roofline", "host"}  # batch 1 is host-bound, batch 65536 is not
