"""Build the graph corpus: timm architectures -> ONNX skeletons -> graphs at many batch sizes.

One Ray task per (architecture, resolution) exports a skeleton once and derives a graph for every
batch size by shape re-inference. Each task writes one parquet shard (one graph per row) and one
manifest entry; finished entries are skipped on the next run, so an interrupted build resumes.
A failing architecture becomes a manifest entry with its error, never a failed build.

Layout under ``out`` (a directory or ``s3://bucket/prefix``)::

    graphs/<arch>@<res>.parquet    graph rows
    onnx/<arch>@<res>.onnx         weight-stripped skeletons
    manifest/<arch>@<res>.json     one entry per task (status, counts, timings)
    manifest.parquet, dataset.json consolidated manifest and provenance
"""
from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
from tqdm.auto import tqdm

from trappm_ray import storage
from trappm_ray.corpus import fallback, keys
from trappm_ray.corpus.selection import interleave_families, select_architectures
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rows import GRAPH_VERSION, graph_to_row
from trappm_ray.ray_init import ensure_ray

RESOLUTIONS = (64, 128, 224)
BATCH_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256, 384,
               512)

log = logging.getLogger(__name__)


@dataclass
class DatasetConfig:
    """What to build and where.

    Args:
        out: output directory or ``s3://`` prefix.
        archs: explicit architectures; empty = the zoo's default selection.
        resolutions, batch_sizes: the grid derived for every architecture.
        other_per_family: architectures taken from each non-paper family in the default selection.
        max_archs: cap on the number of architectures (0 = no cap), for quick runs.
        max_params: architectures above this are recorded as skipped (export cost grows with
            size: a 300M-parameter ViT takes ~30 s to export on one core, a ResNet-50 ~2 s).
        exempt_families: families exported whatever their size, because every member is above
            ``max_params`` (VGG: 133M+) and the family would otherwise be missing.
        labels: a label store (``jobs/collect_labels.py --out``): its architectures join the
            selection and are exported whatever their size, so that every label has a graph
            (empty = none); the labels stage reads them (``labels.label_join.build_labeled``).
        keep_onnx: also store the skeletons.
        retry_failed: re-run tasks whose manifest entry is an error.
        max_export_params: a cap even for labeled and exempt architectures, from what the
            machine's memory holds during an export (about 12 bytes per parameter; 0 = none).
        join_labels: after the build, append the graphs of every ok label key under this label
            store that its ``graphs.parquet`` lacks (``trappm_ray.labels.label_join``).
        extra_sources: add unlabeled models of other sources to the grid: ``hf`` (text models
            at 128 and 512 tokens), ``torchvision``, ``torchvision_dynamo``.
        keys_from: build exactly the labeled keys instead of the grid: ``public`` (the public GPU
            source files under ``public_root``) or ``labels`` (every device's ok rows under
            ``labels``, less the keys its ``graphs.parquet`` already holds); each (arch,
            resolution) is featurized at its labeled batch sizes only.
        public_root: the ``public-gpu`` folder read by ``keys_from=public``.
        groups: with ``keys_from``, only these task groups (``timm-train``, ``timm-infer``,
            ``hf``, ``torchvision``); empty = all, in that order.
        meta_init: build parameters on the meta device and give them random values only for the
            export (same graph, no initialisation cost; ``trappm_ray.corpus.export``).
        ray_address: an existing cluster; None = ``RAY_ADDRESS`` or a private local one.
        num_cpus: CPUs of a private local cluster (0 = all of the machine's).
        task_cpus: CPUs reserved per export task.
    """

    out: str = "artifacts/corpus"
    archs: tuple[str, ...] = ()
    resolutions: tuple[int, ...] = RESOLUTIONS
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    other_per_family: int = 4
    max_archs: int = 0
    max_params: int = 50_000_000
    exempt_families: tuple[str, ...] = ("vgg",)
    labels: str = ""
    keep_onnx: bool = True
    retry_failed: bool = False
    max_export_params: int = 0
    join_labels: str = ""
    extra_sources: tuple[str, ...] = ()
    keys_from: str = ""
    public_root: str = "../shared/data/public-gpu"
    groups: tuple[str, ...] = ()
    meta_init: bool = False
    ray_address: str | None = None
    num_cpus: int = 0
    task_cpus: float = 1.0


def task_name(arch: str, resolution: int) -> str:
    return f"{arch}@{resolution}"


def build_shard(arch: str, resolution: int, batch_sizes: tuple[int, ...], out: str,
                keep_onnx: bool = True, max_params: float = 50_000_000, source: str = "timm",
                meta_init: bool = False) -> dict:
    """Export one architecture at one resolution and write its graphs. Never raises.

    Args:
        arch, resolution: the model (``source`` names where it comes from) and its input size
            (sequence length for text models).
        batch_sizes: the graphs to derive.
        out: corpus root.
        keep_onnx: also store the skeleton.
        max_params: above this, the entry is ``skipped``.
        source, meta_init: see :func:`trappm_ray.corpus.sources.export`.
    """
    from trappm_ray.corpus import sources

    name = task_name(arch, resolution)
    entry = {"task": name, "arch": arch, "family": "", "resolution": resolution, "source": source,
             "status": "ok", "error": "", "graphs": 0, "batch_sizes": sorted(batch_sizes),
             "failed_batch_sizes": [], "export_s": 0.0, "featurize_s": 0.0, "write_s": 0.0,
             "exporter": "", "shard": storage.join("graphs", f"{name}.parquet")}
    t0 = time.perf_counter()
    skeleton = None
    try:
        entry["family"] = sources.family_of(arch, source)
        entry["params_torch"] = sources.count_params(arch, resolution, source)
        if entry["params_torch"] > max_params:
            entry.update(status="skipped", error=f"{entry['params_torch']:,} parameters > "
                         f"max_params {max_params:,.0f}", export_s=time.perf_counter() - t0)
            return entry
        skeleton = sources.export(arch, resolution, source, meta_init=meta_init)
        entry["exporter"] = skeleton.exporter
    except Exception as e:  # noqa: BLE001 - any export failure is data, not a crash
        msg = f"{e.__class__.__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        entry.update(status="error", error=f"export: {msg}", export_s=time.perf_counter() - t0)
        if not isinstance(e, sources.DynamoFailed):  # both exporters failed: fixed batches left
            return entry
    entry["export_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    rows, retry = [], [] if skeleton else list(batch_sizes)
    for bs in batch_sizes if skeleton else ():
        try:
            graph = featurize(skeleton.onnx_bytes, batch_size=bs, resolution=skeleton.resolution,
                              dims=skeleton.dims or None)
        except Exception as e:  # noqa: BLE001
            entry["failed_batch_sizes"].append(bs)
            entry["error"] = f"featurize batch {bs}: {e.__class__.__name__}: {e}"[:300]
            if source == "timm" and fallback.retryable(e):
                retry.append(bs)
            continue
        rows.append(graph_to_row(graph, arch=arch, family=entry["family"], exporter=skeleton.exporter))
    if retry:  # what the legacy skeleton could not give, from the dynamo exporter
        got = fallback.featurize_with_dynamo(arch, resolution, retry, meta_init, dynamic=bool(skeleton))
        rows += [graph_to_row(g, arch=arch, family=entry["family"], exporter=exp)
                 for _, (g, exp) in sorted(got.graphs.items())]
        fallback.record(entry, got, retry)
        if skeleton is None and got.skeleton:  # the dynamo skeleton is the one kept then
            skeleton = sources.Exported(got.skeleton, 0, entry["exporter"], resolution)
    for row in rows:
        row["resolution"] = resolution  # text models: the sequence length (their graph key)
    entry["featurize_s"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    if rows:
        rows.sort(key=lambda r: r["batch_size"])
        storage.write_table(pa.Table.from_pylist(rows), storage.join(out, entry["shard"]))
        if keep_onnx and skeleton:
            storage.write_bytes(storage.join(out, "onnx", f"{name}.onnx"), skeleton.onnx_bytes)
        entry["nodes"] = rows[0]["nodes"]
    else:
        entry["status"] = "error"
    entry["graphs"] = len(rows)
    entry["write_s"] = time.perf_counter() - t2
    return entry


def _write_entry(out: str, entry: dict) -> None:
    storage.write_bytes(storage.join(out, "manifest", f"{entry['task']}.json"),
                        json.dumps(entry).encode())


def read_manifest(out: str) -> list[dict]:
    """All manifest entries written so far."""
    return [json.loads(storage.read_bytes(u)) for u in storage.listdir(
        storage.join(out, "manifest"), ".json")]


@dataclass
class BuildSummary:
    tasks: int
    ran: int
    already_done: int
    graphs: int
    archs_ok: int
    failed: int
    families: dict = field(default_factory=dict)
    wall_s: float = 0.0
    stage_s: dict = field(default_factory=dict)


def _limit(arch: str, cfg: DatasetConfig, labeled: set[str]) -> float:
    from trappm_ray.corpus import zoo

    exempt = zoo.family_of(arch) in cfg.exempt_families or arch in labeled
    return (cfg.max_export_params or float("inf")) if exempt else cfg.max_params


def _is_done(entry: dict | None, cfg: DatasetConfig, labeled: set[str],
             batch_sizes: tuple[int, ...] = ()) -> bool:
    if entry is None:
        return False
    if entry["status"] == "skipped":  # too large then; a higher limit now makes it work to do
        return entry.get("params_torch", 0) > _limit(entry["arch"], cfg, labeled)
    if entry["status"] == "ok":  # done unless batch sizes were added since
        return not set(batch_sizes) - set(entry.get("batch_sizes") or batch_sizes)
    return not cfg.retry_failed


def plan_tasks(cfg: DatasetConfig, label_tasks: list[keys.Task] | None = None,
               labeled: frozenset[str] = frozenset()) -> tuple[list, set[str]]:
    """The tasks of a build (in build order) and the architectures exempt from ``max_params``.

    Args:
        cfg: the build.
        label_tasks: with ``keys_from="labels"``, the label store's keys as tasks
            (:func:`trappm_ray.labels.label_join.label_tasks`: the labels stage reads its store).
        labeled: architectures with label rows, added to the grid whatever their size
            (:func:`trappm_ray.labels.label_join.labeled_architectures` of ``cfg.labels``).
    """
    if cfg.labels and not cfg.keys_from and not labeled:
        raise ValueError("cfg.labels names a label store: pass its architectures as `labeled` "
                         "(trappm_ray.labels.label_join.build_labeled does)")
    if cfg.keys_from:
        if cfg.keys_from == "public":
            tasks = keys.from_public_sources(cfg.public_root)
        elif cfg.keys_from == "labels":
            if label_tasks is None:
                raise ValueError("keys_from='labels' needs the label store's tasks "
                                 "(trappm_ray.labels.label_join.build_labeled passes them)")
            tasks = label_tasks
        else:
            raise ValueError(f"keys_from must be 'public' or 'labels', not {cfg.keys_from!r}")
        tasks = [t for t in tasks if not cfg.groups or t.group in cfg.groups]
        if cfg.archs:
            tasks = [t for t in tasks if t.arch in cfg.archs]
        if cfg.max_archs:
            tasks = tasks[: cfg.max_archs]
        return tasks, {t.arch for t in tasks}  # every labeled model, whatever its size
    archs = list(cfg.archs) or select_architectures(cfg.other_per_family)
    if cfg.max_archs:
        archs = archs[: cfg.max_archs]
    archs += sorted(labeled - set(archs))
    extra = keys.extra_tasks(cfg.extra_sources, cfg.resolutions, cfg.batch_sizes)
    return [keys.Task(a, r, tuple(cfg.batch_sizes), "timm") for a in interleave_families(archs)
            for r in cfg.resolutions] + extra, set(labeled) | {t.arch for t in extra if t.source == "hf"}


def build(cfg: DatasetConfig, label_tasks: list[keys.Task] | None = None,
          labeled: frozenset[str] = frozenset()) -> BuildSummary:
    """Build (or resume) the corpus described by ``cfg`` with Ray tasks (``label_tasks``,
    ``labeled``: as :func:`plan_tasks`)."""
    t0 = time.perf_counter()
    tasks, exempt = plan_tasks(cfg, label_tasks, labeled)
    entries = {e["task"]: e for e in read_manifest(cfg.out)}
    todo = [t for t in tasks if not _is_done(entries.get(task_name(t.arch, t.resolution)), cfg,
                                             exempt, t.batch_sizes)]
    log.info("%d tasks (%d architectures): %d recorded, %d to run -> %s", len(tasks),
             len({t.arch for t in tasks}), len(entries), len(todo), cfg.out)
    if todo:
        ensure_ray(cfg.ray_address, num_cpus=cfg.num_cpus or None)
        import ray
        # Workers are recycled every few tasks: exported models leave allocator caches behind.
        task = ray.remote(num_cpus=cfg.task_cpus, max_calls=8, max_retries=1)(build_shard)
        pending = {}
        for t in todo:
            old = entries.get(task_name(t.arch, t.resolution)) or {}
            bs = sorted(set(t.batch_sizes) | set(old.get("batch_sizes") or []))  # never lose graphs
            ref = task.remote(t.arch, t.resolution, tuple(bs), cfg.out, cfg.keep_onnx,
                              _limit(t.arch, cfg, exempt), t.source, cfg.meta_init)
            pending[ref] = (t.arch, t.resolution)
        finished, bar = 0, tqdm(total=len(todo), desc="exporting", unit="task", disable=None)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            arch, res = pending.pop(ready[0])
            try:
                entry = ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - a crashed worker (OOM kill) is a failed row
                entry = {"task": task_name(arch, res), "arch": arch, "resolution": res,
                         "status": "error", "error": f"worker died: {e.__class__.__name__}",
                         "graphs": 0}
            _write_entry(cfg.out, entry)
            entries[entry["task"]] = entry
            finished += 1
            rate = finished / (time.perf_counter() - t0)
            bar.update(1)
            log.info("[%d/%d] %s: %s %s graphs %s (eta %.1f min)", finished, len(todo), entry["task"],
                     entry["status"], entry["graphs"], entry.get("error", "")[:80],
                     len(pending) / max(rate, 1e-9) / 60)
        bar.close()
    return finalize(cfg, list(entries.values()), ran=len(todo), wall_s=time.perf_counter() - t0)


def finalize(cfg: DatasetConfig, entries: list[dict], ran: int, wall_s: float) -> BuildSummary:
    """Write the consolidated manifest and provenance; return the summary."""
    import torch

    from trappm_ray.corpus import zoo

    entries = sorted(entries, key=lambda e: e["task"])
    cols = ("task", "arch", "family", "resolution", "source", "status", "error", "graphs",
            "shard", "export_s", "featurize_s", "write_s")
    storage.write_table(pa.Table.from_pylist([{c: e.get(c) for c in cols} for e in entries]),
                        storage.join(cfg.out, "manifest.parquet"))
    ok = [e for e in entries if e["status"] == "ok"]
    families: dict[str, int] = {}
    for e in ok:
        families[e["family"]] = families.get(e["family"], 0) + e["graphs"]
    summary = BuildSummary(
        tasks=len(entries), ran=ran, already_done=len(entries) - ran,
        graphs=sum(e["graphs"] for e in ok), archs_ok=len({e["arch"] for e in ok}),
        failed=sum(e["status"] == "error" for e in entries), families=families, wall_s=wall_s,
        stage_s={k: round(sum(e.get(k, 0.0) for e in entries), 1)
                 for k in ("export_s", "featurize_s", "write_s")})
    provenance = {
        "config": asdict(cfg), "summary": asdict(summary), "exporter": zoo.EXPORTER,
        "graph_version": GRAPH_VERSION, "built_at": datetime.now(timezone.utc).isoformat(),
        "versions": {"torch": torch.__version__, "timm": __import__("timm").__version__,
                     "onnx": __import__("onnx").__version__, "python": platform.python_version()},
        "machine": {"cpu": platform.processor() or platform.machine(), "system": platform.system()},
    }
    storage.write_bytes(storage.join(cfg.out, "dataset.json"),
                        json.dumps(provenance, indent=1).encode())
    return summary


def write_sample(corpus: str, out: str, per_family: int = 1, resolution: int = 64,
                 batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32), max_nodes: int = 4000) -> dict:
    """Copy a small, committable slice of a corpus: the smallest graphs of each paper family.

    Writes ``out/graphs.parquet`` (graph rows) and ``out/onnx/<arch>@<res>.onnx`` (skeletons).
    """
    import pyarrow.compute as pc

    from trappm_ray.corpus import zoo

    ok = [e for e in read_manifest(corpus) if e["status"] == "ok" and e["resolution"] == resolution
          and e["family"] in zoo.PAPER_FAMILIES and e.get("nodes", 0) <= max_nodes]
    picked: list[dict] = []
    for fam in zoo.PAPER_FAMILIES:
        picked += sorted((e for e in ok if e["family"] == fam), key=lambda e: e["nodes"])[:per_family]
    tables = []
    for e in picked:
        t = storage.read_table(storage.join(corpus, e["shard"]))
        tables.append(t.filter(pc.is_in(t["batch_size"], pa.array(batch_sizes, t["batch_size"].type))))
        storage.write_bytes(storage.join(out, "onnx", f"{e['task']}.onnx"),
                            storage.read_bytes(storage.join(corpus, "onnx", f"{e['task']}.onnx")))
    table = pa.concat_tables(tables)
    storage.write_table(table, storage.join(out, "graphs.parquet"))
    return {"archs": [e["arch"] for e in picked], "graphs": table.num_rows}
