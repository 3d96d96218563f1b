import json

import pytest

from trappm_ray import cli, errors
from trappm_ray.serving import plan

pytest.importorskip("transformers")
TINY = {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 1000, "n_positions": 128}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_layouts_keep_tensor_parallelism_in_a_node_and_across_heads():
    found = plan.layouts(gpus=16, blocks=4, heads=4, global_batch=32, gpus_per_node=8, micro_batches=(1, 2))
    assert found and all(lo.tp * lo.pp * lo.dp == 16 for lo in found)
    assert {lo.tp for lo in found} == {1, 2, 4} and {lo.pp for lo in found} == {1, 2, 4}
    assert all(32 % (lo.micro_batch * lo.dp) == 0 for lo in found)
    assert {lo.zero for lo in found if lo.dp > 1} == {0, 1, 2, 3} and {lo.zero for lo in found if lo.dp == 1} == {0}


def test_plan_ranks_every_layout_that_fits_fastest_first(config):
    answers = plan.plan(config, gpus=8, device="a100", global_batch=16, seq=128)
    assert len(answers) == len(plan.layouts(8, 4, 4, 16, 8)) and all(a.fits for a in answers)
    times = [a.iteration.total_ms for a in answers]
    assert times == sorted(times)
    split = next(a for a in answers if a.layout.tp > 1)
    assert split.iteration.tp_comm_ms > 0 and split.memory_gb > 0
    assert answers[0].samples_per_s == pytest.approx(16 / times[0] * 1e3)
    idle, tdp = 0.12 * 400, 400  # the A100 SXM4 80 GB's TDP; idle share as physics/power assumes
    assert all(idle < a.power_w <= tdp for a in answers)
    assert answers[0].energy_kj == pytest.approx(answers[0].power_w * 8 * times[0] / 1e6)


def test_plan_answers_a_given_layout(config):
    answers = plan.plan(config, gpus=8, device="a100", global_batch=16, seq=128, only={"tp": 2, "pp": 2, "zero": 0})
    assert answers and {(a.layout.tp, a.layout.pp, a.layout.dp, a.layout.zero) for a in answers} == {(2, 2, 2, 0)}


def test_plan_refuses_what_it_cannot_lay_out(config, tmp_path):
    with pytest.raises(errors.NotAModel, match="plan reads a transformers config"):
        plan.plan("data/sample/onnx/resnet10t@64.onnx", 8, "a100", 16, 128)
    with pytest.raises(errors.BadOption, match="must be >= 1"):
        plan.plan(config, 0, "a100", 16, 128)
    with pytest.raises(errors.UnsupportedOption, match="no layout of 4 blocks and 4 heads on 7 GPUs"):
        plan.plan(config, 7, "a100", 16, 128)
    with pytest.raises(errors.BadOption, match="seq 256 is longer than the model's 128 positions"):
        plan.plan(config, 8, "a100", 16, 256)


def test_grouped_query_attention_limits_tensor_parallelism_to_the_key_value_heads(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                                "vocab_size": 500, "max_position_embeddings": 128}))
    answers = plan.plan(str(path), gpus=8, device="h100", global_batch=16, seq=64, micro_batches=(2,))
    assert answers and {a.layout.tp for a in answers} == {1, 2}


def test_the_cli_prints_the_ranked_table(config, capsys):
    assert cli.main(["plan", config, "--gpus", "4", "--device", "h100", "--global-batch", "8", "--seq", "128",
                     "--top", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "layouts of" in out[0] and len(out) == 2 + 3
    assert out[1].split()[:5] == ["tp", "pp", "dp", "zero", "micro"]
