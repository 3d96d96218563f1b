"""The importer of Zeus's power measurements on tiny hand-written source files, and the power
evaluation's reader of its rows."""
import math

import pytest

from trappm_ray.evaluate import power
from trappm_ray.labels import public_power as Z
from trappm_ray.labels.public import import_public

HEAD = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"


def _zeus(root):
    folder = root / "zeus"
    folder.mkdir(parents=True)
    for gpu in Z.ZEUS_GPUS:
        (folder / f"summary_power_{gpu}.csv").write_text(
            HEAD + "imagenet,resnet50,64,adadelta,250,1000.0,200.5\nimagenet,resnet50,64,adadelta,150,1200.0,148.0\n"
            "librispeech,deepspeech2,8,adamw,250,9.0,90.0\nsquad,bert_base_uncased,12,adamw,200,oops,150\n")


def test_zeus_rows_are_per_limit_steps_with_their_power_and_provenance(tmp_path):
    _zeus(tmp_path / "src")
    summary = import_public(str(tmp_path / "src"), str(tmp_path / "labels"), ("zeus",), "2026-11-29")
    assert set(summary.devices) == {f"{g}-fp32" for g in Z.ZEUS_GPUS.values()}
    assert all(d == {"rows": 3, "ok": 2, "runs": 3, "train_ok": 2, "inference_ok": 0, "error": 1}
               for d in summary.devices.values())
    assert sum("deepspeech2 left out" in i for i in summary.issues) == 3  # no model code: said, not imported
    rows = power.zeus_rows(str(tmp_path / "labels"))
    assert len(rows) == 6 and {r.gpu for r in rows} == set(Z.ZEUS_GPUS.values())
    capped = next(r for r in rows if r.gpu == "v100-pcie-32gb" and r.limit_w == 150.0)
    iterations = math.ceil(1_281_167 / 64)
    assert capped.workload == "torchvision_resnet50" and capped.resolution == 224 and capped.power_w == 148.0
    assert capped.step_ms == pytest.approx(1200.0 * 1e3 / iterations)


def test_a_row_the_reader_cannot_read_is_an_error_row_not_a_crash(tmp_path):
    _zeus(tmp_path)
    found, issues = Z.read_zeus(str(tmp_path / "zeus"))
    bad = [m for m in found if m["status"] == "error"]
    assert len(bad) == 3 and all("unreadable" in m["error"] for m in bad)
    assert all(m["source_repo"] == "ml-energy/zeus" and m["license"] == "Apache-2.0" for m in found)
    (tmp_path / "zeus" / "summary_power_p100.csv").unlink()
    assert "summary_power_p100.csv: missing" in Z.read_zeus(str(tmp_path / "zeus"))[1]


def test_the_committed_zeus_rows_name_their_source_and_have_their_graphs_joined():
    rows = power.zeus_rows()
    assert len(rows) == 642 and {r.workload for r in rows} == set(power.GPU_BOUND) | {"cifar_shufflenetv2"}
    graphs = power.row_graphs(power.LABELS, rows)
    assert {(r.workload, r.batch) for r in rows} <= set(graphs)
