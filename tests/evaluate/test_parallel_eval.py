import pytest

from trappm_ray.evaluate import parallel
from trappm_ray.physics.parallel import Part, Stack


def test_every_vtrain_row_is_read_with_a_layout_that_can_run():
    rows = parallel.runs()
    assert len(rows) == 1440 + 88
    assert {r.layout.gpus for r in rows if not r.multi_node} == {2, 4, 8}
    assert {r.layout.gpus for r in rows if r.multi_node} == {64, 256, 512}
    assert all(r.layers % r.layout.pp == 0 for r in rows)


def test_each_row_is_answered_and_the_layout_terms_add_to_perfect_scaling():
    rows = [r for r in parallel.runs() if r.hidden == 1024 and r.layers == 12][:40]
    part = Part(device_ms=3.0, host_ms=0.5, optimizer_ms=0.2)
    stacks = {(r.hidden, r.heads, r.seq, r.layout.micro_batch, r.layers):
              Stack(part, part, r.layers, 12e6, 50e6, r.layout.micro_batch * r.seq * r.hidden * 2, True) for r in rows}
    found, summary = parallel.evaluate(rows, stacks)
    assert len(found) == len(rows) and summary["layout model"]["all"].rows == len(rows)
    assert all(f["predicted_ms"] >= f["ideal_ms"] for f in found)
    assert f"| {len(rows)} | all |" in parallel.markdown(found, summary, 1.0)


def test_layouts_are_ranked_within_one_model_gpu_count_and_batch():
    rows = [{"layouts_of": g, "measured_ms": m, "predicted_ms": p, "ideal_ms": 1.0}
            for g, pairs in (("a", [(1, 10), (2, 20), (3, 30)]), ("b", [(1, 30), (2, 20), (3, 10)]), ("c", [(1, 1)]))
            for m, p in pairs]
    r = parallel.ranking(rows)
    assert (r.groups, r.median, r.share_at_least_0_9, r.worst, r.worst_group) == (2, 0.0, 0.5, -1.0, "b")
    assert parallel.ranking(rows, "ideal_ms").median == 0.0  # ties rank nothing


def test_micro_batch_ratios_are_scale_free_within_each_layout():
    def row(mb: int, measured: float, predicted: float, gb: int = 16) -> dict:
        return {"row": f"h1024 L12 tp1 pp1 dp2 mb{mb} gb{gb}", "micro_batch": mb, "measured_ms": measured,
                "predicted_ms": predicted}
    # against micro-batch 4: micro-batch 1 reads 2x as measured, micro-batch 2 1.2x where 1.5x was measured
    found = [row(1, 200.0, 100.0), row(2, 150.0, 60.0), row(4, 100.0, 50.0),
             row(8, 80.0, 80.0, gb=32)]  # a sweep of one micro-batch size: no ratio
    ratios = parallel.micro_batch_ratios(found)
    assert (ratios["sweeps"], ratios["n"]) == (1, 2)
    assert ratios["mape"] == pytest.approx((0.0 + 20.0) / 2)
    assert ratios["worst"] == pytest.approx(20.0)


def test_layer_fits_split_an_iteration_into_its_blocks_and_the_rest():
    def row(layers: int, tp: int, measured: float, predicted: float, gpus: int = 1) -> dict:
        return {"hidden": 1024, "layers": layers, "tp": tp, "pp": 1, "dp": gpus, "micro_batch": 1, "global_batch": 8,
                "multi_node": tp * gpus > 8, "measured_ms": measured, "predicted_ms": predicted}
    # measured: 40 ms of rest (5 a micro-batch over 8 micro-batches) + 10 a block; answered 8 + 12 a block
    found = [row(n, 1, 40.0 + 10 * n, 8.0 + 12 * n) for n in (12, 16, 20)]
    found += [row(n, 2, 1.0, 1.0) for n in (12, 16)]  # two block counts: no line
    found += [row(n, 2, 1.0, 1.0, gpus=16) for n in (12, 16, 20)]  # beyond one node
    fits = parallel.layer_fits(found)
    assert list(fits) == [1] and fits[1]["lines"] == 1
    assert fits[1]["rest_measured_ms"] == pytest.approx(5.0) and fits[1]["rest_answered_ms"] == pytest.approx(1.0)
    assert fits[1]["block_ratio"] == pytest.approx(1.2)
    assert "| 1 | 1 | 5.0 | 1.0 | 1.20 |" in parallel.markdown(found[:3], {}, 1.0, layers=fits)
