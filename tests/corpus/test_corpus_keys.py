"""Labeled-key planning: which (arch, resolution) tasks and batch sizes a labeled build runs."""
import json

from trappm_ray.corpus import keys
from trappm_ray.corpus.build import DatasetConfig, plan_tasks


def _public_fixture(root):
    (root / "timm").mkdir(parents=True)
    (root / "timm" / "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv").write_text(
        "model,train_samples_per_sec,train_step_time,train_batch_size,train_img_size,param_count\n"
        "resnet18,100,10,512,224,11.7\n"
        "vit_tiny_patch16_224,100,10,256,224,5.7\n"
        "broken_row,,,,,\n")
    (root / "timm" / "benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv").write_text(
        "model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size,param_count\n"
        "resnet18,224,1000,1,1024,11.7\n"
        "resnet18,288,1000,1,1024.0,11.7\n"
        "levit_128,224,1000,1,256,9.2\n")
    label = root / "neusight" / "label" / "Tesla_T4"
    label.mkdir(parents=True)
    for name in ("bert_large-inf-512-16.json", "bert_large-inf-512-8-fusion.json",
                 "gpt2_large-train-1024-4-dp4.json", "README.txt"):
        (label / name).write_text("{}")
    tv = root / "ryujaehun" / "results" / "TitanV"
    tv.mkdir(parents=True)
    (tv / "config.json").write_text(json.dumps({"BATCH_SIZE": 12}))
    (tv / "TITAN V_single_model_training_benchmark.csv").write_text(",resnet18,vgg11\n0,1.0,2.0\n")
    (root / "ryujaehun" / "results" / "dgx.csv").write_text(",batchs,gpus,times\nhalf,16,1,15.6\n")


def test_public_sources_give_each_key_once_in_build_order(tmp_path):
    _public_fixture(tmp_path)
    tasks = keys.from_public_sources(tmp_path)
    by_key = {(t.arch, t.resolution): t for t in tasks}
    assert by_key[("resnet18", 224)].batch_sizes == (512, 1024)
    assert by_key[("resnet18", 224)].group == "timm-train"  # also inferred: training wins
    assert by_key[("resnet18", 288)].batch_sizes == (1024,)
    assert by_key[("bert_large", 512)].batch_sizes == (8, 16)
    assert by_key[("bert_large", 512)].source == "hf"
    assert by_key[("gpt2_large", 1024)].batch_sizes == (4,)
    assert by_key[("torchvision_vgg11", 224)].batch_sizes == (12,)
    assert not any(a.startswith("broken") or a == "torchvision_half" for a, _ in by_key)
    groups = [t.group for t in tasks]
    assert groups == sorted(groups, key=keys.GROUPS.index)


def test_plan_filters_groups_and_exempts_every_labeled_arch(tmp_path):
    _public_fixture(tmp_path)
    cfg = DatasetConfig(out=str(tmp_path / "out"), keys_from="public", public_root=str(tmp_path),
                        groups=("timm-infer",))
    tasks, exempt = plan_tasks(cfg)
    assert {(t.arch, t.resolution) for t in tasks} == {("resnet18", 288), ("levit_128", 224)}
    assert exempt == {"resnet18", "levit_128"}


def test_source_of_names():
    assert keys.source_of("torchvision_resnet50") == "torchvision"
    assert keys.source_of("gpt2_xl", {"gpt2_xl"}) == "hf"
    assert keys.source_of("resnet50") == "timm"
