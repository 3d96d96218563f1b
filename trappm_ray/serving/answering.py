"""A predictor's rows for many (model, options) items: one pass of each predictor's network over
every graph, each row moved from the batch its labels hold to the batch asked and from the
labels' setting to the one asked (:mod:`trappm_ray.serving.batch_envelope`,
:class:`~trappm_ray.model.compositions.SettingMove`), before :func:`trappm_ray.serving.api.build_prediction`
turns it into a prediction."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import onnx

from trappm_ray import errors
from trappm_ray.graph.featurize import Graph
from trappm_ray.graph.onnx_io import read_model
from trappm_ray.model import correction, launch
from trappm_ray.model.compositions import SettingMove, holding
from trappm_ray.model.estimator import Estimator, device_of
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.options import step_fields
from trappm_ray.model.spec_model import SpecPredictor
from trappm_ray.physics.floors import time_floors_ms
from trappm_ray.physics.memory import fitting_batch
from trappm_ray.physics.roofline import runs_as
from trappm_ray.physics.step_model import MODES as STEP_MODES, StepEstimate, step_time
from trappm_ray.serving import batch_envelope
from trappm_ray.serving.model_input import featurize_with, graph_at
from trappm_ray.serving.prediction import PredictOptions
from trappm_ray.serving.routing import for_text, gpu_spec, predictor_for, settled


def requested_setting(opts: PredictOptions, predictor: Estimator) -> dict:
    """The options a predictor resolves: on a GPU, several ``gpus`` are data parallelism
    (:func:`~trappm_ray.serving.passes.with_data_parallel`), answered from one GPU's step, so the predictor sees one;
    a precision in the one the GPU runs it in (:func:`~trappm_ray.physics.roofline.runs_as`: TF32 without TF32
    tensor cores is fp32, and answered as fp32 is, not by another route that reads it faster)."""
    requested, spec = asdict(opts), gpu_spec(predictor)
    if (opts.gpus or 1) > 1 and spec is not None:
        requested["gpus"] = None
    if spec is not None and opts.precision:  # TF32 where no TF32 units run it is fp32's step
        requested["precision"] = runs_as(spec, opts.precision)
    return requested


def time_floors(graph: Graph, predictor: Estimator, setting: dict) -> dict[str, float]:
    """The least time of a step and a pass of ``graph`` on ``predictor``'s device in ``setting``."""
    return time_floors_ms(graph, device_of(predictor), setting["precision"], setting["optimizer"],
                          predictor.spec if isinstance(predictor, SpecPredictor) else None)


@dataclass
class Answered:
    """One item's answer before the passes after the network (:func:`build_prediction`).

    Attributes:
        row: the predictor's row at the batch and setting asked (targets, bands, floors).
        graph, proto, sha: the model's graph at the batch asked, its ONNX and its digest.
        chosen: the estimator that answered.
        times: the time floors the row was held at (None: :func:`build_prediction` computes them).
        notes: how the row was moved (batch, anchor, held correction).
        held_at: the setting fields whose answer this row must not read slower than
            (:func:`~trappm_ray.model.compositions.held_at`), ``{field: (asked, held at)}``: a TF32 row moved from
            another precision's answer at fp32's; a GPU step without an optimizer at plain SGD's.
    """

    row: dict[str, float]
    graph: Graph
    proto: onnx.ModelProto
    sha: str
    chosen: Estimator
    times: dict[str, float] | None
    notes: list[str]
    held_at: dict[str, tuple[str, str]]


def answer_rows(models: list[tuple[bytes, PredictOptions, str]], predictor: Estimator,
                cache: dict[tuple, object] | None = None) -> list[Answered | errors.ModelError]:
    """Each item's row at its batch and setting (:func:`predict_many`'s first half): one pass per
    predictor over all graphs, each moved from its anchor batch and to the setting asked.
    ``cache``: models read and graphs featurized, by digest, resolution, dims and batch (shared
    between calls)."""
    out: list = [None] * len(models)
    cache = {} if cache is None else cache  # a sweep reads its model and featurizes it once where it can
    known: dict[tuple, Graph] = {}  # per model, resolution and dims: a graph to re-batch
    passes: dict[int, tuple] = {}  # per predictor: its items, and each (graph, setting) once
    text_notes: dict[int, str] = {}

    def cached(key: tuple, make):
        if key not in cache:
            cache[key] = make()
        return cache[key]

    for i, (data, opts, _) in enumerate(models):
        try:
            chosen = predictor_for(opts.device, predictor)
            chosen, setting = settled(requested_setting(opts, chosen), chosen)
            chosen.check(setting)
            sha = hashlib.sha256(data).hexdigest()
            proto = cached((sha,), lambda: read_model(data))
            at = (sha, opts.resolution, opts.dims)
            graph = cached((*at, opts.batch_size), lambda: graph_at(proto, opts, opts.batch_size, known.get(at))
                           if opts.batch_size else featurize_with(proto, opts))
            known.setdefault(at, graph)
            text = graph.meta.get("token_ids") and for_text(chosen, requested_setting(opts, chosen))
            if text:  # a text model on a predictor of image models
                chosen, setting, text_notes[i] = text
            batch, spec = int(graph.static["batch_size"]), gpu_spec(chosen)
            profiles = chosen.manifest.launch
            anchor = 0
            if spec is not None and spec.memory_gb and profiles:  # a GPU: one more batch, where the labels are
                fit = fitting_batch(graph, setting["precision"], setting["optimizer"], spec.memory_gb * 1e9,
                                    fused_attention=launch.labels_fused_attention(chosen.manifest), **step_fields(setting))
                anchor = launch.anchor_batch(batch, fit, profiles)
            try:  # the batches whose answers hold the answer at this one
                above = [cached((*at, b), lambda b=b: graph_at(proto, opts, b, graph)) for b in
                         ([anchor] if anchor and anchor != batch else [] if anchor else
                          batch_envelope.ladder(batch, chosen.manifest.envelope_top))]
            except errors.ModelError:  # a batch that cannot be re-bound: the answer as predicted
                above = []
        except errors.ModelError as e:
            out[i] = e
            continue
        setting = {**setting, "interval_z": opts.interval_z}
        items, slots = passes.setdefault(id(chosen), (chosen, [], {}))[1:]
        # away from the anchor physics answers from the anchor's row: the network runs at the
        # batch asked only for a target the step model does not carry
        moved = bool(anchor) and anchor != batch and bool(above) and set(chosen.targets) <= set(STEP_MODES)
        asked = (*above,) if moved else (graph, *above)
        # a setting no label holds moves last, at the batch asked: the anchor answers in the
        # labels' setting and the batch moves in it (at the anchor a setting's ratio carries that
        # batch's host share: TF32 read 0.40x of fp32 at batch 4096 on an H100, not 0.21x); at the
        # anchor too, so the learned answer is held to its bounds in the setting it was learned in
        # wherever the batch lies (held in fp32 at the anchor and in AMP above it, an RTX 3090's
        # densenet121 step lost throughput from batch 512 to 1024)
        from_anchor = moved or (bool(anchor) and anchor == batch and set(chosen.targets) <= set(STEP_MODES))
        learned_in = chosen.base(setting) if from_anchor and isinstance(chosen, SettingMove) else setting
        keys = [(id(g), json.dumps(learned_in, sort_keys=True)) for g in asked]
        for g, key in zip(asked, keys):
            slots.setdefault(key, (len(slots), g, learned_in))
        items.append((i, proto, sha, graph, setting, learned_in, [int(g.static["batch_size"]) for g in above],
                      anchor, ([None] if moved else []) + keys))
    for chosen, items, slots in passes.values():
        rows = chosen.predict_graphs([g for _, g, _ in slots.values()], [s for *_, s in slots.values()])
        spec, host = gpu_spec(chosen), step_host_us(chosen.manifest.launch)
        for i, proto, sha, graph, setting, learned_in, batches, anchor, keys in items:
            row, *above_rows = ({} if k is None else dict(rows[slots[k][0]]) for k in keys)
            batch, on_gpu = int(graph.static["batch_size"]), bool(anchor)
            learned = (above_rows[0], slots[keys[1]][1]) if on_gpu and batches else (row, graph)  # the network's
            held = correction.held(*learned, chosen.manifest, spec, learned_in) if on_gpu else []  # answer, held
            if on_gpu and (batches or anchor == batch):  # from the anchor, or at it: held to physics' bounds
                at_batch = {batch: graph, anchor: learned[1]}

                def step(b: int, t: str, at_batch=at_batch, s=learned_in, spec=spec, host=host) -> StepEstimate:
                    return step_time(at_batch[b], spec, s, STEP_MODES[t], host)

                times = time_floors(graph, chosen, setting)
                floors = times if learned_in is setting else time_floors(graph, chosen, learned_in)
                row_at, notes = batch_envelope.moved(learned[0], batch, anchor, step, floors)
                row.update(row_at)
                if learned_in is not setting:  # then to the setting asked (SettingMove)
                    chosen.move(row, graph, setting, learned_in)
            else:
                times = None
                notes = batch_envelope.notes(batch_envelope.hold(row, above_rows), batch,
                                             batches[-1] if batches else 0)
            # checked against more work where two routes answer the pair: TF32 moved from another
            # precision's answer (the AMP reference's) against fp32's; a step without an optimizer
            # read from a learned answer without one against SGD's (one moved by the step model
            # from the same base as SGD's is in order already: no second pass for it)
            checks = holding(setting) if spec is not None else {}
            base = chosen.base(setting) if isinstance(chosen, SettingMove) else setting
            if not (isinstance(chosen, SettingMove) and base.get("precision") not in ("tf32", "fp32")):
                checks.pop("precision", None)
            if base.get("optimizer") != "none":
                checks.pop("optimizer", None)
            out[i] = Answered(row, graph, proto, sha, chosen, times,
                              ([text_notes[i]] if i in text_notes else []) + held + notes, checks)
    return out


__all__ = ["requested_setting", "time_floors", "Answered", "answer_rows"]
