"""Weight-free construction and export: the graph is the one a normal export gives."""
import pytest
import torch

from trappm_ray.corpus import export
from trappm_ray.graph.featurize import featurize


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.register_buffer("index", torch.arange(8))
        self.head = torch.nn.Linear(8, 8)
        self.tied = torch.nn.Linear(8, 8)
        self.tied.weight = self.head.weight

    def forward(self, x):
        y = self.bn(self.conv(x)).mean((2, 3))[:, self.index]
        return self.tied(self.head(y)).reshape(x.shape[0], 2, 4)


def _graph(onnx_bytes, bs=4):
    g = featurize(onnx_bytes, batch_size=bs, resolution=16)
    return g.ops, g.edge_index.tolist(), g.out_shape.tolist(), g.static


def _export(model, export_params=True):
    return export.export_legacy(model.eval(), (torch.randn(1, 3, 16, 16),), input_names=["input"],
                                dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                                export_params=export_params)


def test_meta_parameters_keep_buffers_real_and_ties():
    with export.meta_parameters():
        model = Tiny()
    assert model.conv.weight.device.type == "meta"
    assert model.index.device.type == "cpu" and model.index.tolist() == list(range(8))
    assert model.bn.running_var.device.type == "cpu"
    n = export.materialize(model)
    assert n == sum(p.numel() for p in Tiny().parameters())
    assert model.tied.weight is model.head.weight
    assert all(p.device.type == "cpu" and (p > 0).all() for p in model.parameters())


def test_expanded_weights_take_no_memory():
    with export.meta_parameters():
        model = torch.nn.Linear(4096, 4096)
    export.materialize(model, expanded=True)
    assert model.weight.shape == (4096, 4096) and model.weight.stride() == (0, 0)
    export.jitter_real_tensors(model)  # skips broadcast tensors instead of failing on them


@pytest.mark.parametrize("expanded", [False, True])
def test_meta_init_export_gives_the_real_export_graph(expanded):
    torch.manual_seed(0)
    real = Tiny()
    export.jitter_real_tensors(real)
    with export.meta_parameters():
        lean = Tiny()
    export.materialize(lean, expanded=expanded)
    export.jitter_real_tensors(lean)
    assert _graph(_export(lean, export_params=not expanded)) == _graph(_export(real))


def test_timm_rms_norm_exports_as_elementwise_ops():
    timm_norm = pytest.importorskip("timm.layers.norm")
    before = timm_norm.rms_norm
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), timm_norm.RmsNorm(8)).eval()
    data = export.export_legacy(model, (torch.randn(2, 8),), input_names=["x"],
                                dynamic_axes={"x": {0: "batch"}})
    g = featurize(data, batch_size=4)
    assert {"ReduceMean", "Sqrt"} <= set(g.ops) or {"ReduceMean", "Reciprocal"} <= set(g.ops)
    assert timm_norm.rms_norm is before  # restored after the export


def test_unfused_attention_is_restored():
    config = pytest.importorskip("timm.layers.config")
    from trappm_ray.corpus import zoo

    before = config.use_fused_attn()
    with zoo.unfused_attention():
        assert not config.use_fused_attn()
    assert config.use_fused_attn() == before


def test_graphs_name_a_timm_other_than_the_pinned_one(monkeypatch):
    """An export under an isolated older timm (architectures the pinned one no longer defines)
    says so in its exporter string; the pinned timm adds nothing."""
    import re
    from pathlib import Path

    import timm

    from trappm_ray.corpus import zoo

    pin = re.search(r'"timm==([^"]+)"', (Path(__file__).parents[2] / "pyproject.toml").read_text()).group(1)
    assert zoo.PINNED_TIMM == pin
    monkeypatch.setattr(timm, "__version__", pin)
    assert zoo.timm_provenance() == ""
    monkeypatch.setattr(timm, "__version__", "0.6.5")
    assert zoo.timm_provenance() == ", timm 0.6.5"


def test_an_unreleased_architecture_is_built_with_its_recorded_widths():
    """vit_base2_patch32_256 (timm's benchmark measured it from the development branch): built as
    ViT-B/32 at width 896 with 14 heads, it has the parameter count the labels record (119.46M),
    and its graphs say how they were built."""
    pytest.importorskip("timm")
    from trappm_ray.corpus import zoo

    model = zoo.create_model("vit_base2_patch32_256", 256, device="meta")
    assert model.embed_dim == 896 and len(model.blocks) == 12 and model.blocks[0].attn.num_heads == 14
    assert round(sum(p.numel() for p in model.parameters()) / 1e4) == 11946
    assert zoo.timm_provenance("vit_base2_patch32_256").endswith(
        "built as vit_base_patch32_224 with embed_dim=896, num_heads=14")
    assert "built as" not in zoo.timm_provenance("vit_base_patch32_224")


def test_switch_experts_dispatch_with_static_shapes_to_the_same_values():
    """A Switch MoE layer under ``static_expert_capacity`` (each expert computes its capacity of
    token slots, gathered and scattered back) gives transformers' own answer; the patch is undone
    after the block."""
    import torch

    transformers = pytest.importorskip("transformers")
    from transformers.models.switch_transformers import modeling_switch_transformers as sw

    from trappm_ray.corpus.text_models import static_expert_capacity

    config = transformers.SwitchTransformersConfig(d_model=16, d_ff=32, num_experts=4, expert_capacity=5)
    torch.manual_seed(0)
    layer = sw.SwitchTransformersSparseMLP(config).eval()
    x = torch.randn(3, 12, 16)
    want, (_, index) = layer(x)
    original = sw.SwitchTransformersSparseMLP.forward
    with static_expert_capacity():
        assert sw.SwitchTransformersSparseMLP.forward is not original
        got, (_, index2) = layer(x)
    assert sw.SwitchTransformersSparseMLP.forward is original
    assert torch.allclose(got, want, atol=1e-6) and torch.equal(index, index2)
