"""Transfer learning between two synthetic devices whose times differ by a factor."""
import numpy as np
import pytest

from tests.label_builders import SLUG, make_labeled_dir
from trappm_ray.labels.examples import load_examples
from trappm_ray.model.manifest import NETWORK, Device, Manifest, Network
from trappm_ray.model.networks import GraphEncoder
from trappm_ray.model.predictor import Predictor, register
from trappm_ray.train.regressors import embed, fit, prepare, recipe_with
from trappm_ray.train.splits import split
from trappm_ray.train.finetune import (FinetuneConfig, finetune_markdown, finetune_predictor,
                                 finetune_table)

RECIPE = recipe_with("trappm-ray", max_epochs=40, patience=40, hidden=16, fc=32)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("transfer"))
    make_labeled_dir(root)
    make_labeled_dir(root, slug="slow-device", scale=2.5)
    ex = load_examples(root, SLUG, targets=("train_step_ms",))
    data = prepare(ex.data)
    enc = GraphEncoder(data[0].x.size(1), (8, 4), 0.0)
    y = ex.column("train_step_ms")
    tr, va, _ = split(ex.rows, "none", 0)
    heads, scalers = [], []
    for seed in (0, 1):
        out = fit(data, y, embed(enc, data), tr, va, RECIPE, seed)
        heads.append(out["model"])
        scalers.append(out["scaler"])
    manifest = Manifest(name="source", kind=NETWORK, feature_set="v2", targets=("train_step_ms",), device=Device(SLUG),
                        network=Network(seeds=(0, 1), head={"hidden": 16, "fc": 32, "dropout": 0.05,
                                                            "batch_affine": ["train_step_ms"]},
                                        encoder={"in_dim": enc.in_dim, "dims": list(enc.dims), "dropout": 0.0}))
    return root, Predictor(manifest, enc, {"train_step_ms": heads}, {"train_step_ms": scalers})


def test_fine_tuning_adapts_to_the_slower_device(source):
    root, pred = source
    table = finetune_table(pred, root, "slow-device", sizes=(12,), scratch=RECIPE)
    r = table["train_step_ms"]
    assert r["no_transfer"] > 40  # 2.5x slower: the source predictor is ~60% off
    assert r["fine_tuned"][12] < 0.5 * r["no_transfer"]
    assert np.isfinite(r["scratch"][12])
    md = finetune_markdown(table, SLUG, "slow-device")
    assert "fine-tuned n=12" in md[2] and md[-1].startswith("| train_step_ms |")


def test_transfer_job_registers_an_adapted_predictor(source, ray_session, tmp_path):
    root, pred = source
    registry = str(tmp_path / "registry")
    src_uri = register(pred, registry, SLUG)
    out = finetune_predictor(FinetuneConfig(labels=root, device="slow-device", source=src_uri,
                                            registry=registry, epochs=20))
    assert out["uri"].endswith("slow-device/v0001")
    assert out["val_mape"]["train_step_ms"] < 0.5 * out["val_mape_source_as_is"]["train_step_ms"]
    assert sorted(out["targets_left_out"]) == ["inference_ms", "train_memory_mb"]
    adapted = Predictor.load(out["uri"])
    assert adapted.manifest.device.slug == "slow-device"
    assert adapted.manifest.transfer["source"] == src_uri
    graphs = [d for d in load_examples(root, "slow-device", targets=("train_step_ms",)).data]
    ratio = (adapted.predict_data(graphs[:6])["train_step_ms"].mean()
             / pred.predict_data(graphs[:6])["train_step_ms"].mean())
    assert 2.0 < ratio < 3.1  # the second device is 2.5x slower


def test_transfer_job_needs_the_new_device(source):
    root, _ = source
    with pytest.raises(ValueError, match="required"):
        finetune_predictor(FinetuneConfig(labels=root, source=""))
