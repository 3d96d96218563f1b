"""What a prediction reads: ONNX bytes from a path, ``s3://`` URI, bytes or ModelProto, or a torch
module, a timm name or a transformers config exported on the fly (the ``zoo`` extra), each with a
label for the answer. Files above the size limit are refused before they are read.

A transformers model comes by its config alone, never its weights: a ``config.json`` path, a folder
holding one, or a Hugging Face id (``gpt2``, ``bert-base-uncased``, ``meta-llama/Llama-3.2-1B``)
whose config is in the local Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``); nothing is downloaded. Its sequence length is an input dimension
(``--dim seq=N``, ``dims={"seq": N}``). Tied weights (GPT-2's and BERT's embeddings and output
head) count once.
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import os
import re
from importlib import metadata
from pathlib import Path

import onnx

from trappm_ray import errors, storage
from trappm_ray.graph.featurize import Graph, featurize
from trappm_ray.graph.onnx_io import Limits, read_model
from trappm_ray.graph.rebatch import at_batch
from trappm_ray.serving.prediction import PredictOptions

DEFAULT_RESOLUTION = 224  # for torch modules, which carry no input shape, and timm names whose configuration names none
# The class a config without ``architectures`` is built as, by ``model_type``.
DEFAULT_ARCHITECTURE = {"bert": "BertModel", "roberta": "RobertaModel", "gpt2": "GPT2LMHeadModel",
                        "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                        "opt": "OPTForCausalLM", "gpt_neox": "GPTNeoXForCausalLM", "t5": "T5EncoderModel"}
GPT2_KEYS = ("n_embd", "n_layer", "n_head")  # a GPT-2-style config that forgot its model_type


def export_cache() -> Path:
    """Where timm names' exports are kept between calls (``TRAPPM_CACHE``, else
    ``~/.cache/trappm-ray``), per timm version: a new timm may export another graph."""
    root = Path(os.environ.get("TRAPPM_CACHE") or Path.home() / ".cache" / "trappm-ray")
    try:
        timm_version = metadata.version("timm")
    except metadata.PackageNotFoundError:  # no timm: nothing will be exported either
        timm_version = "none"
    return root / "exports" / f"timm-{timm_version}"


def hub_cache() -> Path:
    """The local Hugging Face hub cache (read only; nothing is downloaded)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def cached_config(model_id: str) -> Path | None:
    """The newest ``config.json`` of ``model_id`` in the local hub cache, None if absent."""
    snapshots = hub_cache() / f"models--{model_id.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1] if found else None


def checked_config(config: dict, label: str) -> dict:
    """``config`` with its ``model_type`` and ``architectures`` filled in where a default says
    them; errors.NotAModel when neither it nor GPT-2's keys say what to build (no import)."""
    config = dict(config)
    if "model_type" not in config and all(k in config for k in GPT2_KEYS):
        config["model_type"] = "gpt2"
    if "model_type" not in config:
        raise errors.NotAModel(f"{label}: a transformers config needs a model_type (or GPT-2 keys "
                               f"{', '.join(GPT2_KEYS)})")
    if not config.get("architectures"):
        config["architectures"] = [DEFAULT_ARCHITECTURE.get(config["model_type"], "AutoModelForCausalLM")]
    return config


def config_model(config: dict, label: str) -> bytes:
    """A transformers model exported from its config (no weights, batch and ``seq`` dynamic)."""
    config = checked_config(config, label)
    from trappm_ray.corpus.text_models import export_text_model  # torch/transformers, on use

    try:
        return export_text_model(label, config=config)[0]
    except ImportError:
        raise errors.NotAModel(f"{label}: transformers configs need the zoo extra") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise errors.NotAModel(f"{label}: not a config transformers can build ({str(e).splitlines()[0][:200]})") from None


def config_file(path: Path) -> dict | None:
    """The config dict when ``path`` is a ``config.json`` (or a folder holding one), else None."""
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if not (path.is_file() and path.suffix == ".json"):
        return None
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise errors.TooLarge(f"{path}: a config of {path.stat().st_size:,} bytes is not a transformers config")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise errors.NotAModel(f"{path}: not JSON ({e})") from None
    if not isinstance(config, dict):
        raise errors.NotAModel(f"{path}: a transformers config is a JSON object")
    return config


MAX_CONFIG_BYTES = 1 << 20
# timm registers each model by decorating its entry point, and its old names in a table of
# deprecations (still accepted); reading both from timm's sources answers "is this a timm name?"
# in ~25 ms, where importing timm (and torch) takes seconds.
REGISTERED = re.compile(r"@register_model\s*\n\s*def\s+(\w+)")
DEPRECATED = re.compile(r"register_model_deprecations\(\s*__name__\s*,\s*\{(.*?)\}\s*\)", re.S)
DEPRECATED_NAME = re.compile(r"['\"]([\w.\-]+)['\"]\s*:")


@functools.cache
def timm_names() -> frozenset[str] | None:
    """The model names the installed timm accepts (None: timm is not installed)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        return None
    names: set[str] = set()
    for f in (Path(spec.origin).parent / "models").glob("*.py"):
        text = f.read_text(encoding="utf-8", errors="replace")
        names.update(REGISTERED.findall(text))
        names.update(n for block in DEPRECATED.findall(text) for n in DEPRECATED_NAME.findall(block))
    return frozenset(names)


def check_timm_name(text: str) -> None:
    """errors.NotAModel, with the nearest names, when ``text`` (``name`` or ``name.pretrained_tag``)
    is no model the installed timm registers; nothing when it is, or when timm is absent."""
    names = timm_names()
    if names is None or text.split(".")[0] in names:
        return
    near = difflib.get_close_matches(text.split(".")[0].replace("-", "_").lower(), names, n=4, cutoff=0.7)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    raise errors.NotAModel(f"{text} is neither a file, a timm model{hint}, nor a Hugging Face id whose "
                           f"config.json is in the local cache ({hub_cache()})")


def _export_module(module, resolution: int, input_shape: tuple[int, ...] | None) -> bytes:
    """A torch module exported as the corpus exports models (dynamic batch, weights stripped)."""
    import torch

    from trappm_ray.corpus.export import export_legacy

    shape = tuple(input_shape or (3, resolution, resolution))
    return export_legacy(module.eval(), (torch.randn(1, *shape),), ["input"],
                         {"input": {0: "batch"}, "output": {0: "batch"}})


def config_params(config: dict, label: str) -> int:
    """Parameters of a transformers config (tied weights once), counted on the meta device: no
    weights, no export (a second for a 70B config)."""
    config = checked_config(config, label)
    from trappm_ray.corpus.text_models import count_params  # torch/transformers, on use

    try:
        return count_params(label, config=config)
    except ImportError:
        raise errors.NotAModel(f"{label}: transformers configs need the zoo extra") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise errors.NotAModel(f"{label}: not a config transformers can build ({str(e).splitlines()[0][:200]})") from None


def model_bytes(model, resolution: int | None = None, input_shape: tuple[int, ...] | None = None,
                limits: Limits = Limits()) -> tuple[bytes, str]:
    """``(ONNX bytes, a label)`` for a path, ``s3://`` URI, bytes, ModelProto, transformers config
    (its dict too), torch module or timm name (configs, modules and timm names need the ``zoo``
    extra and are exported on the fly)."""
    if isinstance(model, dict):
        label = f"config ({model.get('model_type') or 'gpt2'})"
        return config_model(model, label), label
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "<bytes>"
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString(), model.graph.name or "<ModelProto>"
    if hasattr(model, "state_dict") and callable(model):
        return _export_module(model, resolution or DEFAULT_RESOLUTION, input_shape), type(model).__name__
    text = os.fspath(model)
    if text.startswith("s3://"):
        fs, key = storage.fs_and_path(text)
        if fs.size(key) > limits.max_file_bytes:
            raise errors.TooLarge(f"{text} is above the limit of {limits.max_file_bytes:,} bytes")
        return storage.read_bytes(text), text
    path = Path(text)
    config = config_file(path)
    if config is not None:
        return config_model(config, text), text
    if path.is_file():
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            raise errors.TooLarge(f"file is {size:,} bytes, limit {limits.max_file_bytes:,}")
        if size > limits.weightless_above:  # shapes are all a prediction needs: weights stay on disk
            return read_model(path, limits).SerializeToString(), text
        return path.read_bytes(), text
    hub = cached_config(text) if not path.exists() and text.count("/") <= 1 else None
    if hub is not None:
        return config_model(config_file(hub) or {}, text), text
    if path.suffix == ".onnx" or os.sep in text:
        raise errors.NotAModel(f"{text} is not a file, nor a Hugging Face id whose config.json is in the local cache "
                               f"({hub_cache()}): pass the config.json (no weights needed)")
    check_timm_name(text)
    # no size asked: the model's own (its configuration's), kept under "own" so that a cached
    # export is read back without importing timm
    cached = export_cache() / f"{text}@{resolution or 'own'}.onnx"
    if cached.is_file():  # a timm name exported before (18 s for ResNet-50): read it back
        return cached.read_bytes(), text
    from trappm_ray.corpus.zoo import export_skeleton, own_resolution  # torch and timm are imported inside, on use

    res = resolution or own_resolution(text) or DEFAULT_RESOLUTION
    try:
        data = export_skeleton(text, res).onnx_bytes
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(cached)  # atomic: a concurrent reader sees the whole file or none
        except OSError:  # a read-only home: answer without caching
            pass
        return data, text
    except ImportError:
        raise errors.NotAModel(f"{text} is not a file (timm names need the zoo extra)") from None
    except RuntimeError as e:  # a name timm registers (checked above) whose model would not build or export
        raise errors.NotAModel(f"timm's {text} could not be exported at {res} px ({str(e)[:200]})"
                               f"{'' if resolution else '; pass the size it takes (--resolution)'}") from None


def featurize_with(proto: onnx.ModelProto, opts: PredictOptions, batch_size: int | None = None) -> Graph:
    """``proto`` featurized at ``batch_size`` (default the options'; None there: as exported)."""
    return featurize(proto, batch_size=batch_size or opts.batch_size, resolution=opts.resolution,
                     dims=dict(opts.dims) or None)


def graph_at(proto: onnx.ModelProto, opts: PredictOptions, batch_size: int, known: Graph | None = None) -> Graph:
    """``proto`` featurized at ``batch_size``: by per-batch arithmetic from ``known`` (the same
    model featurized at another batch) where :func:`~trappm_ray.graph.rebatch.at_batch` proves
    it exact, else by a featurize."""
    return (known is not None and at_batch(known, batch_size)) or featurize_with(proto, opts, batch_size)


__all__ = ["featurize_with", "graph_at", "DEFAULT_RESOLUTION", "export_cache", "hub_cache", "cached_config", "checked_config", "config_file", "config_model",
           "timm_names", "check_timm_name", "model_bytes"]
