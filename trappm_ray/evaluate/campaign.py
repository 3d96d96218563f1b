"""How the answers hold on the GPU campaign's rows (``docs/gpu-campaign.md``).

Checks on rows no part of any answer was fitted to, on a GPU none has labels of:

* the CUDA memory model (:func:`trappm_ray.physics.memory.training_memory`, whose constants are
  assumptions, not fits) against the measured peaks: ``reserved`` against
  ``cuda_max_reserved_mb``, ``allocated`` against ``cuda_max_allocated_mb``, ``device_used``
  against ``nvml_used_mb``; per setting (checkpointing and accumulation included);
* three step-time answers (:data:`Answer`): the step model alone, the spec-based predictor in
  the settings it was trained on, and the product's (passed in by the job), training and
  inference: absolute error, and the error of each batch sweep's ratios ``t(b) / t(b_max)``
  (batch scaling alone, free of the level);
* the step model's moves between settings (:func:`setting_move_errors`), what the product does
  for a setting no label holds.

Errors are ``predicted / measured - 1``; summaries give the median and p90 of their magnitude,
the median signed error (the bias) and the worst row.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from trappm_ray import devices
from trappm_ray.evaluate.phases import HostFigure, PhaseSplit, phase_readings
from trappm_ray.graph.featurize import Graph
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.labels.campaign_import import is_campaign_device, mean_train_power_w
from trappm_ray.labels.examples import GRAPH_KEY
from trappm_ray.labels.store import device_slugs, ok_labels
from trappm_ray.model.manifest import Manifest
from trappm_ray.model.spec_model import SpecModel, SpecPredictor
from trappm_ray.physics.memory import MiB, training_memory
from trappm_ray.physics.power import PowerModel, step_power
from trappm_ray.physics.step_model import MODES, Setting, device_scale, step_time
from trappm_ray.train.gpu_examples import graph_index

# the memory model's precision for a campaign precision (TF32 keeps fp32 tensors)
MEMORY_PRECISION = {"tf32": "fp32"}
BUSY_BATCH = 32  # from here on the campaign's steps keep the GPU busy (not host-bound)
REFERENCE = "amp-fp16/sgd-momentum/nchw"  # timm's setting: the shipped GPU predictors' labels
MEMORY_PEAKS = {"reserved": "cuda_max_reserved_mb", "reserved_replayed": "cuda_max_reserved_mb",
                "allocated": "cuda_max_allocated_mb", "device_used": "nvml_used_mb"}


@dataclass
class ErrorSummary:
    """Relative errors of one group of rows."""
    rows: int
    median_abs_pct: float
    p90_abs_pct: float
    median_signed_pct: float
    worst_pct: float
    worst_row: str
    mean_abs_pct: float = 0.0  # MAPE: what vTrain, NeuSight and Calculon report
    covered_pct: float | None = None  # rows whose measurement lies in the answer's interval
    band_x: float | None = None  # the intervals' median width, high / low

    @classmethod
    def of(cls, errors: list[tuple[float, str]], bands: list[tuple[bool, float]] | None = None) -> ErrorSummary:
        """Summary of ``(predicted / measured - 1, row)`` pairs; with ``bands`` (per row: whether
        the interval held the measurement, and its high / low) also the interval's coverage."""
        e = np.array([x for x, _ in errors])
        worst = int(np.argmax(np.abs(e)))
        out = cls(len(e), float(np.median(np.abs(e)) * 100), float(np.percentile(np.abs(e), 90) * 100),
                  float(np.median(e) * 100), float(e[worst] * 100), errors[worst][1], float(np.abs(e).mean() * 100))
        if bands:
            out.covered_pct = float(np.mean([c for c, _ in bands]) * 100)
            out.band_x = float(np.median([w for _, w in bands]))
        return out


# a step-time answer for one row and its graph: {target: ms}, None where it refuses the row
Answer = Callable[[dict, Graph], "dict[str, float] | None"]
TARGETS = ("train_step_ms", "inference_ms", "train_power_w", "inference_power_w")
POWER_WINDOW_S = 1.0  # shorter timed windows: NVML's power reading averages over about this much


@dataclass
class CampaignEvaluation:
    """What :func:`evaluate` found for one campaign device folder.

    ``time`` and ``ratio`` hold, per answer (``step model``, ``spec-based``, ``product``) and
    target (``train_step_ms``, ``inference_ms``), the errors per setting: of the time itself and
    of each sweep's ``t(b) / t(b_max)``; ``refused`` counts the rows an answer declines."""
    device: str
    rows: int
    rows_with_graph: int
    memory: dict[str, dict[str, ErrorSummary]] = field(default_factory=dict)  # peak -> setting -> errors
    time: dict[str, dict[str, dict[str, ErrorSummary]]] = field(default_factory=dict)
    ratio: dict[str, dict[str, dict[str, ErrorSummary]]] = field(default_factory=dict)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)  # answer -> setting -> rows
    autotuned: int = 0  # rows of graphs with convolutions measured with cuDNN autotuning on: no memory check
    host: list[HostFigure] = field(default_factory=list)  # the host's time per kernel, measured
    phases: list[PhaseSplit] = field(default_factory=list)  # the kernels' rates per phase, measured / modelled

    def to_dict(self) -> dict:
        return asdict(self)


def setting_name(row: dict) -> str:
    parts = [row["precision"], row["optimizer"], row["memory_format"]]
    parts += [f"recompute-{row['recompute']}"] if (row.get("recompute") or "none") != "none" else []
    parts += [f"accum{row['grad_accum']}"] if (row.get("grad_accum") or 1) != 1 else []
    return "/".join(map(str, parts))


def joined_graphs(labels_dir: str, rows: list[dict]) -> dict[tuple, Graph]:
    """The graphs of ``rows``' keys in ``<labels_dir>/graphs.parquet`` (the label join the GPU
    predictors train from, :func:`trappm_ray.train.gpu_examples.graph_index`)."""
    wanted = {tuple(r[k] for k in GRAPH_KEY) for r in rows}
    return {key: row_to_graph(g) for key, g in graph_index(labels_dir, ()).items() if key in wanted}


def autotuned(row: dict, graph: Graph) -> bool:
    """Whether the row's memory peaks are cuDNN's autotuning trials', not the step's: measured
    with ``cudnn.benchmark`` on, of a graph with convolutions (4.7 GB reserved for a ResNet-50 at
    batch 1 in fp32, where the step holds 1.6 GB)."""
    return row.get("cudnn_benchmark") == "on" and "Conv" in graph.ops


def memory_errors(rows: list[dict], graphs: dict[tuple, Graph]) -> dict[str, dict[str, ErrorSummary]]:
    """The memory model against each measured peak, per setting (``all``: every row but the
    :func:`autotuned` ones)."""
    found: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        graph = graphs.get(tuple(r[k] for k in GRAPH_KEY))
        if graph is None or autotuned(r, graph):
            continue
        how = dict(precision=MEMORY_PRECISION.get(r["precision"], r["precision"]), optimizer=r["optimizer"],
                   grad_accum=int(r.get("grad_accum") or 1), recompute=(r.get("recompute") or "none") != "none")
        est = training_memory(graph, **how).to_mb()
        # the caching allocator replayed (physics/allocator.py): what the answers' packing misses
        est["reserved_replayed"] = training_memory(graph, **how, allocator="replay").reserved / MiB
        for term, col in MEMORY_PEAKS.items():
            if r.get(col):
                err = (est[term] / r[col] - 1, f"{r['arch']}@{r['resolution']} b{r['batch_size']} {setting_name(r)}")
                found[term][setting_name(r)].append(err)
                found[term]["all"].append(err)
    return {term: {s: ErrorSummary.of(e) for s, e in sorted(groups.items())} for term, groups in found.items()}


def answered_by(manifest: Manifest, row: dict) -> bool:
    """Whether the spec model was trained on the row's setting (one process, no recompute)."""
    opts = manifest.options
    return (row["precision"] in opts.get("precision", []) and row["optimizer"] in opts.get("optimizer", [])
            and row["memory_format"] in opts.get("memory_format", ["nchw"])
            and (row.get("recompute") or "none") == "none" and (row.get("grad_accum") or 1) == 1)


def spec_answer(predictor: SpecPredictor) -> Answer:
    """The spec-based predictor's answer, in the settings it was trained on."""
    def answer(row: dict, graph: Graph) -> dict[str, float] | None:
        if not answered_by(predictor.manifest, row):
            return None
        s = {k: row[k] for k in ("precision", "optimizer", "memory_format")}
        return predictor.predict_graphs([graph], [s])[0]
    return answer


def campaign_rows(labels_dir: str, keep: Callable[[dict], object] = bool) -> Iterator[tuple[dict, Graph]]:
    """Every campaign folder's ok rows that ``keep`` accepts, each with its joined graph (rows
    without one are left out): what the checks that span all campaign GPUs read."""
    for slug in device_slugs(labels_dir):
        if not is_campaign_device(labels_dir, slug):
            continue
        rows = [r for r in ok_labels(labels_dir, slug).to_pylist() if r.get("campaign_item") and keep(r)]
        graphs = joined_graphs(labels_dir, rows)
        for r in rows:
            if (graph := graphs.get(tuple(r[k] for k in GRAPH_KEY))) is not None:
                yield r, graph


def physics_precision(row: dict) -> str:
    """The step model's precision of a row: ``fp32-strict`` for fp32 measured with cuDNN's TF32
    off (``allow_tf32`` ``none``: gpu-v1's shards 0-8), else the row's own."""
    strict = row["precision"] == "fp32" and row.get("allow_tf32") in ("none", "matmul")
    return "fp32-strict" if strict else row["precision"]


def as_measured(answer: Answer) -> Answer:
    """``answer``, refusing rows whose measured math no option of the product asks for: strict
    fp32 where the graph has convolutions (the product's fp32 runs them in TF32, PyTorch's
    default; its matrix products are strict FP32 either way)."""
    def wrapped(row: dict, graph: Graph) -> dict[str, float] | None:
        if physics_precision(row) == "fp32-strict" and "Conv" in graph.ops:
            return None
        return answer(row, graph)
    return wrapped


def row_setting(row: dict) -> Setting:
    """The step model's setting of a campaign row (precision, optimizer, checkpointing, accumulation)."""
    return Setting(precision=physics_precision(row), optimizer=row["optimizer"],
                   recompute=(row.get("recompute") or "none") != "none", grad_accum=int(row.get("grad_accum") or 1))


def step_model_answer(spec: devices.DeviceSpec) -> Answer:
    """The step model alone (:mod:`trappm_ray.physics.step_model`) on the device's specs, with
    its default host figures: nothing of it was fitted to a GPU's times; its power from the
    power model (:mod:`trappm_ray.physics.power`, fitted on other GPUs)."""
    power = PowerModel.load()

    def answer(row: dict, graph: Graph) -> dict[str, float] | None:
        s = row_setting(row)
        try:
            steps = {t: step_time(graph, spec, s, mode) for t, mode in MODES.items()}
        except ValueError:  # a precision the device has no sourced peak for
            return None
        return {**{t: e.total_ms for t, e in steps.items()},
                "train_power_w": step_power(steps["train_step_ms"], spec, power).power_w,
                "inference_power_w": step_power(steps["inference_ms"], spec, power).power_w}
    return answer


def measured_value(row: dict, target: str) -> float | None:
    """The row's measurement of ``target``. Training power: the energy counter's mean over the
    timed steps (:func:`~trappm_ray.labels.campaign_import.mean_train_power_w`); inference power
    (no counter read): the sampled readings' mean, over a window of at least
    :data:`POWER_WINDOW_S` (shorter ones read the trailing average's catching up)."""
    if target == "train_power_w":
        return mean_train_power_w(row)
    if target == "inference_power_w":  # its window: the timed forwards
        window = (row.get("inference_ms") or 0) * (row.get("inference_steps_timed") or 0) / 1e3
        return row.get("inference_power_w_mean") if window >= POWER_WINDOW_S else None
    return row.get(target)


def time_errors(rows: list[dict], graphs: dict[tuple, Graph], answer: Answer
                ) -> tuple[dict[str, dict[str, ErrorSummary]], dict[str, dict[str, ErrorSummary]], dict[str, int]]:
    """Per target: (errors of the time, errors of each sweep's ``t(b) / t(b_max)``) per setting,
    and the rows ``answer`` refuses per setting."""
    refused: dict[str, int] = defaultdict(int)
    absolute: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    bands: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))  # where the answer has an interval
    ratio: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    sweeps: dict[tuple, list] = defaultdict(list)
    for r in rows:
        graph = graphs.get(tuple(r[k] for k in GRAPH_KEY))
        if graph is None:
            continue
        got = answer(r, graph)
        if got is None:
            refused[setting_name(r)] += 1
            continue
        for t in TARGETS:
            measured = measured_value(r, t)
            if measured and np.isfinite(got.get(t, np.nan)):
                busy = [f"all, batch >= {BUSY_BATCH}"] if r["batch_size"] >= BUSY_BATCH else []
                low, high = got.get(f"{t}_low"), got.get(f"{t}_high")
                for group in (setting_name(r), "all", *busy):
                    absolute[t][group].append((got[t] / measured - 1, f"{r['arch']}@{r['resolution']} b{r['batch_size']}"))
                    if low and high:
                        bands[t][group].append((low <= measured <= high, high / low))
                if t in MODES:  # batch scaling of times (a power is no sum over the batch)
                    sweeps[(t, r["arch"], r["resolution"], setting_name(r))].append((r["batch_size"], got[t], measured))
    for (t, arch, res, setting), points in sweeps.items():
        top = max(points)
        for b, pred, measured in points:
            if b != top[0]:
                err = (pred / top[1]) / (measured / top[2]) - 1
                for group in (setting, "all"):
                    ratio[t][group].append((err, f"{arch}@{res} b{b} vs b{top[0]}"))

    def summarize(found: dict[str, dict[str, list]]) -> dict[str, dict[str, ErrorSummary]]:
        return {t: {g: ErrorSummary.of(e, bands[t].get(g) if found is absolute else None) for g, e in sorted(groups.items())}
                for t, groups in found.items()}
    return summarize(absolute), summarize(ratio), dict(refused)


def setting_move_errors(rows: list[dict], graphs: dict[tuple, Graph], spec: devices.DeviceSpec
                        ) -> dict[str, dict[str, ErrorSummary]]:
    """How the step model moves an answer between settings (what
    :class:`~trappm_ray.model.compositions.SettingMove` does): per target and setting, the error
    of its ratio ``t(setting) / t(REFERENCE)`` against the measured one, at equal model and batch.
    ``REFERENCE`` is timm's setting, the one the shipped GPU predictors' labels hold. As in the
    product, both settings run on the device the answer reads: the step model's kernel times
    scaled so that it reads the measured reference step at the sweep's largest batch (the
    anchor, where the GPU, not the host, sets the step)."""
    measured = {(r["arch"], r["resolution"], r["batch_size"], setting_name(r)): r for r in rows}
    anchors: dict[tuple, dict] = {}
    for (arch, res, b, setting), r in measured.items():
        if setting == REFERENCE and b > anchors.get((arch, res), {}).get("batch_size", 0):
            anchors[(arch, res)] = r
    scales = {}
    for key, r in anchors.items():
        graph = graphs.get(tuple(r[k] for k in GRAPH_KEY))
        for t, mode in MODES.items():
            if graph is not None and r.get(t):
                scales[(*key, t)] = device_scale(step_time(graph, spec, row_setting(r), mode), r[t])
    found: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for (arch, res, b, setting), r in measured.items():
        ref = measured.get((arch, res, b, REFERENCE))
        graph = graphs.get(tuple(r[k] for k in GRAPH_KEY))
        if setting == REFERENCE or ref is None or graph is None:
            continue
        for t, mode in MODES.items():
            if not (r.get(t) and ref.get(t)):
                continue
            try:
                got, base = (step_time(graph, spec, row_setting(x), mode) for x in (r, ref))
            except ValueError:  # a precision the device has no sourced peak for
                continue
            scale = scales.get((arch, res, t), 1.0)
            err = (got.with_device_scale(scale) / base.with_device_scale(scale)) / (r[t] / ref[t]) - 1
            # small steps are host-bound: their times scatter by 20-30% from run to run
            for group in (setting, "all", *([f"all, batch >= {BUSY_BATCH}"] if b >= BUSY_BATCH else [])):
                found[t][group].append((err, f"{arch}@{res} b{b}"))
    return {t: {g: ErrorSummary.of(e) for g, e in sorted(groups.items())} for t, groups in found.items()}


def evaluate(labels_dir: str, slug: str, spec_model: SpecModel | None = None,
             product: Answer | None = None) -> CampaignEvaluation:
    """The memory and step-time checks on the ok rows of the campaign device folder ``slug``.

    Args:
        labels_dir: the label store (``data/labels``), with its joined graphs.
        slug: a campaign folder (``h100-sxm5-80gb-amp-bf16``).
        spec_model: the spec-based model (None: the shipped one).
        product: what ``trappm-ray predict`` answers for a row (the job passes it; None: not checked).
    """
    rows = [r for r in ok_labels(labels_dir, slug).to_pylist() if r.get("campaign_item")]
    graphs = joined_graphs(labels_dir, rows)
    out = CampaignEvaluation(slug, len(rows), sum(tuple(r[k] for k in GRAPH_KEY) in graphs for r in rows))
    out.memory = memory_errors(rows, graphs)
    out.autotuned = sum(autotuned(r, g) for r in rows if (g := graphs.get(tuple(r[k] for k in GRAPH_KEY))))
    if not rows:
        return out
    spec = devices.get(rows[0]["device_spec"])
    answers = {"step model": step_model_answer(spec),
               "spec-based": as_measured(spec_answer(SpecPredictor(spec_model or SpecModel.load(), spec)))}
    if product is not None:
        answers["product"] = as_measured(product)
    for name, answer in answers.items():
        out.time[name], out.ratio[name], out.refused[name] = time_errors(rows, graphs, answer)
    joined = [(r, g) for r in rows if (g := graphs.get(tuple(r[k] for k in GRAPH_KEY))) is not None]
    out.host, out.phases = phase_readings(joined, spec, row_setting)
    return out


def evaluate_moves(labels_dir: str, slugs: list[str]) -> dict[str, dict[str, dict[str, ErrorSummary]]]:
    """:func:`setting_move_errors` per GPU over every campaign folder of it in ``slugs`` (one
    folder per precision, so the pairs span folders)."""
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    for slug in slugs:
        for r in ok_labels(labels_dir, slug).to_pylist():
            if r.get("campaign_item"):
                by_gpu[r["device_spec"]].append(r)
    return {gpu: setting_move_errors(rows, joined_graphs(labels_dir, rows), devices.get(gpu))
            for gpu, rows in sorted(by_gpu.items())}


__all__ = ["autotuned", "row_setting", "physics_precision", "as_measured", "MEMORY_PRECISION",
           "MEMORY_PEAKS", "TARGETS", "POWER_WINDOW_S", "measured_value", "Answer", "ErrorSummary",
           "CampaignEvaluation", "setting_name", "campaign_rows", "joined_graphs", "memory_errors",
           "answered_by", "spec_answer", "step_model_answer", "time_errors", "setting_move_errors",
           "REFERENCE", "evaluate", "evaluate_moves"]
