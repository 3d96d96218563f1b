"""Graphs for the batch sizes that a corpus skeleton could not give, from the dynamo exporter.

:func:`trappm_ray.corpus.build.build_shard` exports each (architecture, resolution) once, with
the legacy exporter, and featurizes that skeleton at every batch size. Some skeletons export but
cannot be featurized: the legacy exporter writes ``If`` nodes for Python branches on shapes
(SAM2's Hiera), leaves shape arithmetic the featurizer cannot follow (DINOv3's rotary
embeddings), or could only export at a fixed batch that cannot be re-bound (CondConv
EfficientNets). For those batch sizes the dynamo exporter (``torch.export``) is tried: it traces
with every shape known and specialises such branches, so it writes neither.

First with a dynamic batch axis; where that export fails or the model takes the batch as an
attribute (CondConv convolves the whole batch as one sample with ``groups = batch``), once per
batch size at that fixed batch. Each graph is the model as it runs at its batch size: nothing is
re-bound or approximated, only another exporter writes it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from trappm_ray import errors
from trappm_ray.graph.featurize import Graph, featurize

log = logging.getLogger(__name__)


def retryable(error: BaseException) -> bool:
    """Whether another exporter's graph may featurize where this featurize error arose.

    Constructs and shapes depend on the exporter; a graph too large for any device does not.
    """
    return isinstance(error, (errors.UnsupportedConstruct, errors.UnresolvedShapes))


@dataclass
class Retried:
    """What the dynamo exporter gave for the batch sizes asked.

    Attributes:
        graphs: batch size -> (graph, exporter provenance string).
        errors: batch size -> why it still has no graph.
        skeleton: the dynamic-batch dynamo skeleton, where one was exported.
    """

    graphs: dict[int, tuple[Graph, str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    skeleton: bytes | None = None


def _message(stage: str, e: BaseException) -> str:
    text = str(e).strip()
    return f"{stage}: {e.__class__.__name__}: {text.splitlines()[0][:240] if text else ''}"


def featurize_with_dynamo(arch: str, resolution: int, batch_sizes, meta_init: bool = True,
                          dynamic: bool = True) -> Retried:
    """Graphs of a timm model at ``batch_sizes`` from the dynamo exporter.

    Args:
        arch, resolution: the timm model and its input size.
        batch_sizes: the batch sizes still without a graph.
        meta_init: see :func:`trappm_ray.corpus.sources.export`.
        dynamic: try a dynamic-batch export first (False: it has failed already, go straight
            to the fixed-batch exports).
    """
    from trappm_ray.corpus import sources

    out, per_batch = Retried(), not dynamic
    if dynamic:
        try:
            sk = sources.export(arch, resolution, meta_init=meta_init, dynamo=True)
        except Exception as e:  # noqa: BLE001 - an export failure is data
            log.warning("%s@%s: dynamo export failed (%s)", arch, resolution, _message("export", e))
            out.errors = {bs: _message("export (dynamo)", e) for bs in batch_sizes}
            per_batch = True  # a symbolic batch may be what fails (batch as an attribute)
        else:
            out.skeleton = sk.onnx_bytes
            for bs in batch_sizes:
                try:
                    out.graphs[bs] = (featurize(sk.onnx_bytes, batch_size=bs,
                                                resolution=resolution), sk.exporter)
                except Exception as e:  # noqa: BLE001
                    out.errors[bs] = _message(f"featurize (dynamo) batch {bs}", e)
                    per_batch |= isinstance(e, errors.FixedBatch)
    if per_batch:
        for bs in [b for b in batch_sizes if b not in out.graphs]:
            try:
                sk = sources.export(arch, resolution, meta_init=meta_init, fixed_batch=bs)
            except Exception as e:  # noqa: BLE001
                out.errors[bs] = _message(f"export (dynamo, batch {bs})", e)
                break  # the same model at another batch fails the same way: no more exports
            try:
                out.graphs[bs] = (featurize(sk.onnx_bytes, batch_size=bs, resolution=resolution),
                                  sk.exporter)
                out.errors.pop(bs, None)
            except Exception as e:  # noqa: BLE001
                out.errors[bs] = _message(f"featurize (dynamo, batch {bs})", e)
    log.info("%s@%s: dynamo fallback gave %d of %d graphs", arch, resolution, len(out.graphs),
             len(list(batch_sizes)))
    return out


def record(entry: dict, retried: Retried, asked: list[int]) -> None:
    """Update a corpus manifest entry (``build_shard``'s) with what the fallback gave for the
    batch sizes ``asked``: failed batch sizes, error, and status and exporter where the legacy
    export had failed altogether. The error the fallback answered is kept as ``fallback_from``."""
    failed = set(entry["failed_batch_sizes"]) | set(asked)
    entry["failed_batch_sizes"] = sorted(failed - set(retried.graphs))
    entry["fallback_from"] = entry["error"]
    if retried.errors:
        entry["error"] = next(reversed(retried.errors.values()))
    elif not entry["failed_batch_sizes"]:
        entry["error"] = ""
    if entry["status"] == "error" and retried.graphs:
        entry.update(status="ok", exporter=next(iter(retried.graphs.values()))[1])


__all__ = ["Retried", "featurize_with_dynamo", "record", "retryable"]
