import json

import pytest

import trappm_ray
from trappm_ray import cli, errors
from trappm_ray.evaluate.parallel import megatron_175b
from trappm_ray.physics import megatron
from trappm_ray.serving import plan
from trappm_ray.serving.model_input import config_params
from trappm_ray.serving.sizing import fitting_profiles

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


def test_a_layouts_power_is_held_at_the_boards_limit(tmp_path):
    # an H100's units at full clock would draw more than its 700 W (890 W read at micro-batch 4 and
    # 8 here): held at the limit, as one GPU's answer is
    wide = tmp_path / "config.json"
    wide.write_text(json.dumps({**TINY, "n_embd": 2048, "n_layer": 2, "n_head": 16, "n_positions": 1024}))
    hopper = plan.plan(str(wide), gpus=8, device="h100", global_batch=64, seq=1024, only={"tp": 1, "pp": 1, "zero": 0})
    assert hopper and all(a.power_w <= 700 for a in hopper) and max(a.power_w for a in hopper) > 600


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


def test_the_cli_reports_a_layout_in_words(config, capsys):
    """predict's human report of a layout: no inference figures to print, power and cost over every GPU."""
    assert cli.main(["predict", config, "--device", "h100", "--gpus", "4", "--parallel", "tp=2,pp=2",
                     "--global-batch", "8", "--micro-batch", "2", "--steps", "100", "--price-per-kwh", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "training power" in out and "inference power" not in out and "sha256" not in out
    # one GPU's power and the layout's, each named for what it counts
    lines = {line[:30].strip(): line[30:].split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert float(lines["training power, 4 GPUs"]) == pytest.approx(4 * float(lines["training power per GPU"]), rel=1e-3)
    assert "energy per step, 4 GPUs" in lines and "W per GPU" in out.splitlines()[0]
    cost = next(line for line in out.splitlines() if "per kWh" in line).split()[-1]
    assert 0 < float(cost) < 0.01  # a hundred steps of a tiny model: a fraction of a cent, not 0.00


def test_a_config_sweeps_and_compares_devices_at_its_context(config, tmp_path, capsys):
    """--sweep and --device a,b read a config's sequence length from its positions, as one answer does."""
    assert cli.main(["predict", config, "--device", "h100", "--sweep", "--sweep-max", "4", "--json",
                     "--plot", str(tmp_path / "sweep.png")]) == 0
    sweep = json.loads(capsys.readouterr().out)["sweep"]
    assert [r["batch_size"] for r in sweep] == [1, 2, 4]
    assert cli.main(["predict", config, "--device", "a100,h100", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r.get("error") for r in rows] == [None, None] and all(r["train_step_ms"] > 0 for r in rows)


def test_a_layouts_sweep_and_comparison_keep_the_layout(config, tmp_path, capsys):
    """--sweep varies a layout's micro-batch and --device a,b compares the layout itself: both
    answered the data-parallel graph path instead."""
    layout = ["--gpus", "4", "--parallel", "tp=2,pp=2", "--global-batch", "8", "--micro-batch", "2", "--json"]
    assert cli.main(["predict", config, "--device", "h100", *layout, "--sweep", "--sweep-max", "8",
                     "--plot", str(tmp_path / "s.png")]) == 0
    one = json.loads(capsys.readouterr().out)
    at = {r["batch_size"]: r["train_step_ms"] for r in one["sweep"]}
    assert at[2] == pytest.approx(one["train_step_ms"]) and set(at) == {1, 2, 4, 8}
    assert cli.main(["predict", config, "--device", "h100,a100", *layout]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model_version"] for r in rows] == ["physics:parallel"] * 2
    assert rows[0]["train_step_ms"] == pytest.approx(one["train_step_ms"])


@pytest.mark.parametrize("option", [{"memory_budget_mb": 4000}, {"layers": 5}, {"grad_accum": 2}])
def test_what_the_layout_model_does_not_answer_is_refused_not_ignored(option):
    with pytest.raises(errors.UnsupportedOption, match=f"{next(iter(option))}: not answered by the layout model"):
        trappm_ray.predict(TINY, batch_size=2, device="h100", gpus=4, parallel="tp=2,pp=2", **option)


def test_graph_reads_a_config_as_predict_does(config, capsys):
    assert cli.main(["graph", config, "--batch-size", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == config_params(TINY, "tiny") and out["nodes"] > 0 and out["batch_size"] == 2


def test_the_cli_plots_time_against_memory_and_where_the_time_goes(config, tmp_path, capsys):
    png = tmp_path / "plan.png"
    assert cli.main(["plan", config, "--gpus", "4", "--device", "h100", "--global-batch", "8", "--seq", "128",
                     "--tp", "2", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize("text,gpus,want", [
    ("dp", 8, {"tp": 1, "pp": 1, "dp": 8, "zero": 0}),
    ("fsdp", 8, {"tp": 1, "pp": 1, "dp": 8, "zero": 3}),
    ("zero2", 4, {"tp": 1, "pp": 1, "dp": 4, "zero": 2}),
    ("tp=2,pp=32,dp=8", 512, {"tp": 2, "pp": 32, "dp": 8, "zero": 0}),
    ("tp=2, pp=2", 8, {"tp": 2, "pp": 2, "dp": 2, "zero": 0}),
    ("tp=2,pp=2,dp=2,zero=1", None, {"tp": 2, "pp": 2, "dp": 2, "zero": 1}),
])
def test_parallel_as_users_write_it(text, gpus, want):
    assert plan.parse_parallel(text, gpus) == want


@pytest.mark.parametrize("text,gpus,needle", [
    ("tp=2,pp=2,dp=2", 16, "uses 8 GPUs, gpus says 16"), ("tp=3", 8, "does not divide gpus 8"),
    ("tp=two", 8, "expected dp, fsdp"), ("zero2", None, "give gpus"), ("tp=1,zero=4", 1, "ZeRO stages are 0-3"),
])
def test_parallel_refusals_say_why(text, gpus, needle):
    with pytest.raises(errors.BadOption, match=needle):
        plan.parse_parallel(text, gpus)


def test_the_api_answers_a_layout_of_a_config_dict_on_a_cluster_dict():
    """The call a platform team makes: a GPT config as a dict, tp x pp x dp over two 4-GPU nodes."""
    gpt = {"n_embd": 64, "n_layer": 4, "n_head": 4, "n_positions": 128, "vocab_size": 1000}
    cluster = {"gpus_per_node": 4, "intra_node_gbs": 150, "inter_node_gbps": 100}
    p = trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=8, parallel="tp=2,pp=2,dp=2", global_batch=16,
                           recompute=True, cluster=cluster)
    d = p.distributed
    assert (d["parallel"], d["gpus"], d["nodes"], d["global_batch"], d["cluster"]) == ("tp=2,pp=2,dp=2", 8, 2, 16, "custom")
    assert p.train_step_ms.low < p.train_step_ms.value == d["total_ms"] < p.train_step_ms.high
    assert d["bubble_ms"] > 0 and d["tp_comm_ms"] > 0 and p.train_memory_mb.value > 0 and p.train_power_w.value > 0
    assert p.throughput_samples_s == pytest.approx(16e3 / p.train_step_ms.value)
    assert p.options["precision"] == "amp-fp16" and p.options["optimizer"] == "adam" and p.graph["seq"] == 128
    # a faster network between the nodes shortens the step; a layout the GPUs cannot hold is refused
    fast = trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=8, parallel="tp=2,pp=2,dp=2", global_batch=16,
                              recompute=True, cluster={**cluster, "inter_node_gbps": 3200})
    assert fast.train_step_ms.value < p.train_step_ms.value
    # Driple's view: where the step goes adds up to it; the pipeline spans both nodes, so its sends
    # and the data-parallel all-reduce cross the network, the tensor-parallel all-reduces do not
    assert sum(d["where_ms"].values()) == pytest.approx(d["total_ms"])
    assert d["where_ms"]["pipeline bubble"] == d["bubble_ms"] and d["where_ms"]["computing"] > 0
    assert d["intra_node_bytes"] > 0 and d["network_bytes"] > 0 and any("over the network" in n for n in p.notes)
    with pytest.raises(errors.BadOption, match="uses 8 GPUs, gpus says 4"):
        trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=4, parallel="tp=2,pp=2,dp=2")
    with pytest.raises(errors.NotAModel, match="plan reads a transformers config"):
        trappm_ray.predict("data/sample/onnx/resnet10t@64.onnx", batch_size=2, device="a100", gpus=4, parallel="tp=2,pp=2")
    with pytest.raises(errors.UnsupportedOption, match="T4 cannot run amp-bf16"):
        trappm_ray.predict(gpt, batch_size=2, device="t4", gpus=4, parallel="tp=2,pp=2", precision="amp-bf16")
    with pytest.raises(errors.BadOption, match="a cluster has no field 'gpus'"):
        trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=4, parallel="tp=2,pp=2", cluster={"gpus": 8})
    # some fields change the GPU's own cluster: a DGX A100 cut to servers of two spans two nodes
    two = trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=4, parallel="tp=2,pp=2", cluster={"gpus_per_node": 2})
    assert two.distributed["nodes"] == 2 and two.distributed["cluster"] == "dgx-a100, gpus_per_node 2"


def test_a_layout_counts_every_gpus_power_and_energy_and_the_cost_of_n_steps():
    gpt = {"n_embd": 64, "n_layer": 4, "n_head": 4, "n_positions": 128, "vocab_size": 1000}
    p = trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=4, parallel="tp=2,pp=2", steps=1000,
                           price_per_hour=2.0, price_per_kwh=0.25)
    watts, c = p.train_power_w.value, p.training_cost
    assert p.power["total_train_power_w"] == pytest.approx(4 * watts)
    assert p.power["energy_per_step_j"] == pytest.approx(4 * watts * p.train_step_ms.value / 1e3)
    assert c.hours == pytest.approx(1000 * p.train_step_ms.value / 3.6e6) and c.cost == pytest.approx(4 * c.hours * 2.0)
    assert c.energy_kwh == pytest.approx(4 * c.hours * watts / 1e3) and c.energy_cost == pytest.approx(0.25 * c.energy_kwh)
    with pytest.raises(errors.UnsupportedOption, match="power limit .* not yet for a tensor, pipeline or ZeRO layout"):
        trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=4, parallel="tp=2,pp=2", power_limit_w=300)


def test_data_parallel_makes_up_the_global_batch_by_accumulation():
    p = trappm_ray.predict("data/sample/onnx/resnet10t@64.onnx", batch_size=8, device="a100", gpus=4, parallel="dp",
                           global_batch=64)
    assert p.options["grad_accum"] == 2 and p.distributed["global_batch"] == 64 and p.options["gpus"] == 4
    # the GPU fit holds the memory per GPU with DDP's buckets, not one GPU's alone
    assert p.smallest_profile == fitting_profiles(p.train_memory_mb.high)[1]
    with pytest.raises(errors.BadOption, match="no multiple of batch_size x gpus = 32"):
        trappm_ray.predict("data/sample/onnx/resnet10t@64.onnx", batch_size=8, device="a100", gpus=4, global_batch=48)


def test_the_cli_predicts_a_layout(config, capsys):
    assert cli.main(["predict", config, "--batch-size", "2", "--device", "a100", "--gpus", "8",
                     "--parallel", "tp=2,pp=2", "--global-batch", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["distributed"]["parallel"] == "tp=2,pp=2,dp=2" and out["train_step_ms"] > 0
    assert "tensor x pipeline x data" in " ".join(out["notes"])


@pytest.mark.slow
def test_gpt3_175b_on_1024_a100s_reads_as_megatron_measured_it():
    """Narayanan et al. (SC'21): 140 TFLOP/s per GPU, a 31.5 s iteration by the paper's FLOP count
    (``evaluate.parallel.megatron_175b``); answered from the config alone, weights never built."""
    gpt3 = {"n_embd": 12288, "n_layer": 96, "n_head": 96, "n_positions": 2048, "vocab_size": 50257}
    p = trappm_ray.predict(gpt3, batch_size=1, device="a100-sxm4-80gb", gpus=1024, parallel="tp=8,pp=16,dp=8",
                           global_batch=1536, recompute=True, cluster="dgx-a100")
    assert p.train_step_ms.value == pytest.approx(megatron_175b().measured_ms, rel=0.15)
    assert p.distributed["fits"]
    # its weights, gradients and Adam's fp32 master and moments (16 bytes a parameter) over 8 x 16 GPUs
    assert p.train_memory_mb.value * 2**20 > 16 * 174.6e9 / (8 * 16)
    # one GPU: the layout model answers too (exporting 175B parameters' graph takes minutes), no fit
    one = trappm_ray.predict(gpt3, batch_size=1, device="a100-sxm4-80gb")
    assert one.model_version == "physics:parallel" and not one.distributed["fits"]
    assert one.train_memory_mb.value * 2**20 > 16 * 174.6e9


def test_a_layouts_memory_holds_megatrons_weights_gradients_and_optimizer_state():
    assert megatron.megatron_state_bytes("fp16", "adam") == (2.0, 2.0, 12.0)  # ZeRO's 16 bytes a parameter
    assert megatron.megatron_state_bytes("fp32", "adam") == (4.0, 4.0, 8.0)
    assert megatron.megatron_state_bytes("bf16", "sgd-momentum") == (2.0, 2.0, 8.0)
    assert megatron.megatron_state_bytes("fp16", "none") == (2.0, 0.0, 0.0)
    gpt = {"model_type": "gpt2", "n_embd": 2048, "n_layer": 8, "n_head": 16, "n_positions": 256, "vocab_size": 1000}
    params = config_params(gpt, "gpt")
    for gpus, tp, pp in ((1, 1, 1), (4, 2, 2)):
        a = plan.plan(gpt, gpus, "h100", 1, 256, only={"tp": tp, "pp": pp, "micro_batch": 1})[0]
        assert a.memory_gb * 1e9 > 16 * params / (tp * pp)  # the first stage holds the embedding: at least its share


def test_a_config_file_gives_its_positions_as_the_sequence_length_as_a_dict_does(config, tmp_path):
    assert plan.config_dims(config) == plan.config_dims(TINY) == {"seq": 128}
    assert plan.config_dims(tmp_path) == plan.config_dims("s3://bucket/config.json") == {}
    assert plan.config_dims("data/sample/onnx/resnet10t@64.onnx") == {}
