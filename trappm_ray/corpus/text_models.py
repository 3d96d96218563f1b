"""Transformer language models from configs (no weights): NeuSight's LMs and a few common ones.

A model is named by its config: NeuSight's ``DLmodel_configs/<name>.json`` (``bert_large``,
``gpt2_xl``, ``opt_13``, ``switchxl4``, ...) or one of :data:`EXTRA_CONFIGS` (BERT-base, GPT-2
small, a T5-small encoder, a LLaMA-style decoder) or a GPT by its shape, ``gpt_h{hidden}_a{heads}_l{layers}``
(:func:`gpt_shape_config`). It is built with ``transformers`` from the
config alone, its parameters on the meta device, and exported by torch's legacy exporter with
``input_ids [batch, seq]`` and both axes dynamic; the output is the logits (the last hidden
state for encoders). ``trappm-ray graph FILE --batch-size 4 --dim seq=512`` featurizes it.

Weights are never copied: each parameter is one random scalar broadcast to its shape and the
export writes no weight values (``export_legacy(export_params=False)``), which gives the graph of
a normal export (checked by ``tests/corpus/test_corpus_sources_slow.py``) for models of several GB.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from functools import lru_cache
from pathlib import Path

from trappm_ray.graph.featurize import TIED_WEIGHTS_KEY

log = logging.getLogger(__name__)

# NeuSight's HF configs, copied into the repository with their license (data/public/neusight-configs/README.md)
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "data" / "public" / "neusight-configs")
EXPORTER = ("torch.onnx legacy (dynamo=False), opset 17, eval mode, transformers from config, "
            "input_ids with dynamic batch and seq axes")
# Common architectures beside NeuSight's (issue 23): published sizes, written out here.
EXTRA_CONFIGS = {
    "hf_bert_base": {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 768,
                     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                     "vocab_size": 30522, "max_position_embeddings": 512},
    "hf_gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768,
                "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
    "hf_t5_small_encoder": {"model_type": "t5", "architectures": ["T5EncoderModel"], "d_model": 512,
                            "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
                            "vocab_size": 32128},
    "hf_llama_decoder": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                         "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
                         "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
                         "max_position_embeddings": 4096},
    # a ~1.1 B-parameter LLaMA-style decoder (TinyLlama's published shape), for the GPU campaign
    "hf_llama_1b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                    "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
                    "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048},
}


# A GPT of a given shape, as vTrain's Megatron runs name theirs (hidden size, heads, layers): a GPT-2
# config of GPT-2's vocabulary, positions for the longest sequence the runs use.
GPT_SHAPE = re.compile(r"^gpt_h(?P<hidden>\d+)_a(?P<heads>\d+)_l(?P<layers>\d+)$")
GPT_SHAPE_POSITIONS = 2048


def gpt_shape_config(name: str) -> dict | None:
    """The config of a ``gpt_h{hidden}_a{heads}_l{layers}`` name (None for any other name)."""
    m = GPT_SHAPE.match(name)
    if m is None:
        return None
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": int(m["hidden"]),
            "n_head": int(m["heads"]), "n_layer": int(m["layers"]), "vocab_size": 50257,
            "n_positions": GPT_SHAPE_POSITIONS}


def exporter_of(name: str, config_dir: str | None = None) -> str:
    """The exporter string of ``name``'s graphs: :data:`EXPORTER`, and for a mixture of experts
    how its dispatch was exported (:func:`static_expert_capacity`)."""
    config = config_dict(name, config_dir)
    if config.get("num_experts"):
        return (f"{EXPORTER}, experts at static capacity ({config['num_experts']} x "
                f"{config.get('expert_capacity')} token slots per sequence)")
    return EXPORTER


def _config_dir(config_dir: str | None) -> Path:
    return Path(config_dir or CONFIG_DIR)


@lru_cache(maxsize=4)
def config_names(config_dir: str | None = None) -> tuple[str, ...]:
    """Every model name this module builds: NeuSight's configs (if present) and the extras."""
    d = _config_dir(config_dir)
    found = sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []
    return tuple(found) + tuple(EXTRA_CONFIGS)


def config_dict(name: str, config_dir: str | None = None) -> dict:
    """The config of ``name`` as a dict.

    Raises:
        KeyError: no such config.
    """
    if name in EXTRA_CONFIGS:
        return dict(EXTRA_CONFIGS[name])
    if (shaped := gpt_shape_config(name)) is not None:
        return shaped
    path = _config_dir(config_dir) / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"no text-model config {name!r} (looked in {path.parent} and EXTRA_CONFIGS)")
    return json.loads(path.read_text())


def family_of(name: str, config_dir: str | None = None) -> str:
    """The config's ``model_type`` (``bert``, ``gpt2``, ``opt``, ...), or the name's first word."""
    try:
        return str(config_dict(name, config_dir)["model_type"])
    except (KeyError, OSError, ValueError):
        return name.removeprefix("hf_").split("_")[0]


def build_model(name: str, config_dir: str | None = None, meta: bool = True,
                attn_implementation: str | None = "eager", config: dict | None = None):
    """A transformers model of config ``name``, eval mode, KV cache off, eager attention.

    Args:
        name: a name from :func:`config_names`.
        config_dir: folder of NeuSight-style configs (default :data:`CONFIG_DIR`).
        meta: parameters on the meta device (see :func:`trappm_ray.corpus.export.meta_parameters`).
        attn_implementation: transformers' attention kernel; ``eager`` (explicit matmul + softmax)
            traces into ONNX, None takes the library's default (SDPA), as training runs it.
        config: the config itself, instead of looking ``name`` up.
    """
    import torch
    import transformers

    from trappm_ray.corpus import export

    d = dict(config) if config is not None else config_dict(name, config_dir)
    d.pop("_name_or_path", None)
    arch = (d.get("architectures") or ["AutoModelForCausalLM"])[0]
    config = transformers.AutoConfig.for_model(**d)
    config.use_cache = False
    if arch == "BertLMHeadModel":
        config.is_decoder = True  # as NeuSight runs it: a causal LM head on BERT
    cls = getattr(transformers, arch, None) or transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    with export.meta_parameters() if meta else contextlib.nullcontext():
        model = cls._from_config(config, attn_implementation=attn_implementation)
    return model.eval()


class _LogitsOnly:
    """Wraps a transformers model so that tracing sees ``input_ids -> logits`` only."""

    def __new__(cls, model):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner
                self.seq2seq = bool(getattr(inner.config, "is_encoder_decoder", False))

            def forward(self, input_ids):
                kwargs = {"input_ids": input_ids, "return_dict": False}
                if self.seq2seq:
                    kwargs["decoder_input_ids"] = input_ids
                return self.inner(**kwargs)[0]

        return Wrapper(model)


@contextlib.contextmanager
def traceable_masks():
    """Within the block, transformers builds attention masks by broadcasting instead of vmap.

    transformers >= 4.53 evaluates its mask functions under ``torch.vmap``, which the
    TorchScript tracer cannot follow; the mask functions are elementwise comparisons of
    indices, so broadcasting the index vectors gives the same mask.
    """
    try:
        from transformers import masking_utils
    except ImportError:  # older transformers: nothing to patch
        yield
        return
    original = getattr(masking_utils, "_vmap_for_bhqkv", None)
    packed = getattr(masking_utils, "find_packed_sequence_indices", None)

    def broadcast(mask_function, bh_indices: bool = True):
        def fn(batch_idx, head_idx, q_idx, kv_idx):
            if not bh_indices:
                return mask_function(None, None, q_idx[:, None], kv_idx[None, :]).expand(
                    q_idx.shape[0], kv_idx.shape[0])
            out = mask_function(batch_idx[:, None, None, None], head_idx[None, :, None, None],
                                q_idx[None, None, :, None], kv_idx[None, None, None, :])
            return out.expand(batch_idx.shape[0], head_idx.shape[0], q_idx.shape[0], kv_idx.shape[0])
        return fn

    if original is not None:
        masking_utils._vmap_for_bhqkv = broadcast
    if packed is not None:  # packed-sequence detection reads position values: not traceable
        masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        if original is not None:
            masking_utils._vmap_for_bhqkv = original
        if packed is not None:
            masking_utils.find_packed_sequence_indices = packed


def _capacity_dispatch(self, hidden_states):
    """A Switch MoE layer's forward with static shapes: each expert takes exactly its capacity of
    token slots per sequence (the first tokens routed to it, as the router's capacity mask keeps
    them; unfilled slots carry zero weight), gathered, run and scattered back. Equal in value to
    transformers' boolean-mask dispatch, whose token counts are data-dependent."""
    import torch

    router_mask, router_probs, router_logits = self.router(hidden_states)
    _, seq, width = hidden_states.shape
    slots = self.router.expert_capacity  # the trace needs seq >= capacity (export_text_model)
    rank = torch.arange(seq, 0, -1, device=hidden_states.device, dtype=hidden_states.dtype)
    out = torch.zeros_like(hidden_states)
    for idx, expert in enumerate(self.experts.values()):
        routed = router_mask[:, :, idx].to(hidden_states.dtype)
        take = torch.topk(routed * rank, slots, dim=1).indices  # routed tokens first, in order
        kept = torch.gather(routed, 1, take).unsqueeze(-1)
        where = take.unsqueeze(-1).expand(-1, -1, width)
        out = out.scatter_add(1, where, expert(torch.gather(hidden_states, 1, where)) * kept)
    return router_probs * out, (router_logits, torch.argmax(router_mask, dim=-1))


@contextlib.contextmanager
def static_expert_capacity():
    """Within the block, Switch Transformer MoE layers dispatch with static shapes
    (:func:`_capacity_dispatch`): the graph computes each expert on its full capacity of tokens,
    the work of a balanced router (with the labels' 512 or 2048 tokens and 4 experts of capacity
    64, every expert is offered more tokens than it keeps)."""
    try:
        from transformers.models.switch_transformers import modeling_switch_transformers as sw
    except ImportError:
        yield
        return
    original = sw.SwitchTransformersSparseMLP.forward
    sw.SwitchTransformersSparseMLP.forward = _capacity_dispatch
    try:
        yield
    finally:
        sw.SwitchTransformersSparseMLP.forward = original


def count_params(name: str, config_dir: str | None = None, config: dict | None = None) -> int:
    """Parameter count (tied weights once), on the meta device; ``config``: the config itself,
    instead of looking ``name`` up."""
    import torch

    with torch.device("meta"):
        model = build_model(name, config_dir, meta=False, config=config)
    return sum(p.numel() for p in model.parameters())


def export_text_model(name: str, config_dir: str | None = None, meta_init: bool = True,
                      example_batch: int = 2, example_seq: int = 16, config: dict | None = None) -> tuple[bytes, int]:
    """Export ``name`` with dynamic ``batch`` and ``seq`` axes; returns (ONNX bytes, params).

    Args:
        name, config_dir: see :func:`build_model`.
        meta_init: broadcast scalars for weights and no weight values in the export (False:
            real random weights, exported then stripped: the reference the lean way is checked
            against).
        example_batch, example_seq: the traced input's size (neither is baked into the graph).
        config: the config itself, instead of looking ``name`` up.
    """
    import torch

    from trappm_ray.corpus import export

    model = build_model(name, config_dir, meta=True, config=config)
    export.materialize(model, expanded=meta_init)
    if not meta_init:
        export.jitter_real_tensors(model)
    params = sum(p.numel() for p in model.parameters())
    capacity = getattr(model.config, "expert_capacity", 0) if getattr(model.config, "num_experts", 0) else 0
    ids = torch.ones(example_batch, max(example_seq, capacity), dtype=torch.long)
    with traceable_masks(), static_expert_capacity():
        onnx_bytes = export.export_legacy(
            _LogitsOnly(model), (ids,), input_names=["input_ids"], output_names=["logits"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
            export_params=not meta_init)
    return mark_tied_weights(model, onnx_bytes), params


def mark_tied_weights(model, onnx_bytes: bytes) -> bytes:
    """Name, in the file's metadata (``TIED_WEIGHTS_KEY``), the weights that are copies of another
    parameter (an output head tied to the input embedding, which the exporter writes as a
    transposed copy under a generated name), so that the featurizer counts them once."""
    import onnx

    unique = {n for n, _ in model.named_parameters()}
    copies = sorted(p.numel() for n, p in model.named_parameters(remove_duplicate=False) if n not in unique)
    if not copies:
        return onnx_bytes
    proto = onnx.load_from_string(onnx_bytes)
    known = unique | {f"inner.{n}" for n in unique}  # _LogitsOnly names its model "inner"
    tensors = [(x.name, [d.dim_value for d in x.type.tensor_type.shape.dim]) for x in proto.graph.input]
    tensors += [(x.name, list(x.dims)) for x in proto.graph.initializer]
    tied = []
    for name, dims in tensors:
        numel = math.prod(dims) if dims and all(dims) else 0
        if name not in known and numel in copies:
            copies.remove(numel)
            tied.append(name)
    if tied:
        proto.metadata_props.add(key=TIED_WEIGHTS_KEY, value=json.dumps(tied))
    return proto.SerializeToString()


__all__ = ["CONFIG_DIR", "EXPORTER", "EXTRA_CONFIGS", "build_model", "config_dict",
           "config_names", "count_params", "gpt_shape_config", "GPT_SHAPE", "export_text_model", "exporter_of", "family_of", "static_expert_capacity",
           "traceable_masks"]
