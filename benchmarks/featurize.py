"""Featurizer speed on one core: trappm vs plain ONNX shape inference vs onnx-tool, and linearity.

Run from the repository root:

    .venv/bin/python benchmarks/featurize.py [--repeat 20] [--threads 1] [--json PATH]
                                             [--big ARCH[,ARCH]] [--series vit|synthetic]
                                             [--depths N,N,...] [--no-stages] [--profile]

What it does (see benchmarks/README.md):

* Inputs (exported once, cached in ``artifacts/bench/``): the ResNet-101 skeleton at 224
  (``trappm_ray.corpus.zoo.export_skeleton``), one large real graph (default ``davit_small`` at 224,
  5,222 nodes; ``--big swin_base_patch4_window7_224`` has 6,548), and a node-count series for
  the linearity check: ``vit_tiny_patch16_224`` exported with ``depth`` = 7 .. 112 blocks (about
  500 .. 7,900 nodes), or with ``--series synthetic`` a stack of transformer-like blocks built
  with ``onnx.helper`` (no torch needed; 34 nodes a block).
* For each input, at batch 32, after 2 warm-ups, ``--repeat`` runs of each of (interleaved, so
  background load hits all alike):
  (a) ``trappm_ray.graph.featurize.featurize(bytes, batch_size=32)`` end to end (parse, binding, ONNX
      shape inference, numpy shape folding, the per-node cost pass), and separately
      ``trappm_ray.graph.features.node_features(graph, "v2")``; plus a per-stage split
      (read_model / infer / build_graph) unless ``--no-stages``;
  (b) the baseline: ``onnx.load_from_string`` + batch dim set to 32 +
      ``onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)``;
  (c) onnx-tool (``pip install onnx-tool``) where importable: ``onnx_tool.Model(proto)``,
      ``graph.shape_infer({input: zeros(32, ...)})``, ``graph.profile()``.
  Reported: wall-clock median, p90, min (ms), process CPU time, and the ratios trappm/baseline
  and trappm/onnx-tool.
* Linearity over the series: least-squares ``time = a + b * nodes`` (per-node us, R^2, largest
  deviation from the fit) and time per 1,000 nodes at the smallest and largest graph.
* Targets, PASS/FAIL, on "trappm total" = featurize + node_features (medians): ResNet-101 at
  batch 32 <= 30 ms; 5,000 nodes <= 300 ms, both as the fitted series slope evaluated at 5,000
  nodes and as the measured large graph against the budget scaled to its node count.

The process is pinned to one CPU (``os.sched_setaffinity``) and math libraries to one thread,
because the target is "on one core". Timings depend on the machine and on its load: the load
average is printed and stored with the numbers.
"""
from __future__ import annotations

import argparse
import os
import sys

# Thread counts must be fixed before numpy (or torch) is imported.
_early = argparse.ArgumentParser(add_help=False)
_early.add_argument("--threads", type=int, default=1)
_THREADS = max(1, _early.parse_known_args()[0].threads)
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = str(_THREADS)

import cProfile  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from trappm_ray.graph import features as trappm_features  # noqa: E402
from trappm_ray.graph import featurize as trappm_featurize  # noqa: E402
from trappm_ray.graph import onnx_io  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "artifacts" / "bench"
BATCH = 32
RESOLUTION = 224
WARMUP = 2
RESNET_TARGET_MS = 30.0
NODES_TARGET = 5000
NODES_TARGET_MS = 300.0
DEFAULT_BIG = "davit_small"  # 5,222 nodes at 224 (swin_base_patch4_window7_224: 6,548)
SERIES_ARCH = "vit_tiny_patch16_224"
DEFAULT_DEPTHS = "7,14,28,56,84,112"
DEFAULT_SYNTH_BLOCKS = "16,32,64,128,192,256"


# ----------------------------------------------------------------------------------------------
# inputs

def _export_timm(arch: str, resolution: int, **model_kwargs) -> bytes:
    """``zoo.export_skeleton`` with extra timm model arguments (``depth=...``)."""
    from trappm_ray.corpus import zoo

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zoo.export_skeleton(arch, resolution, max_params=None, **model_kwargs).onnx_bytes


def _skeleton(arch: str) -> bytes:
    from trappm_ray.corpus import zoo

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zoo.export_skeleton(arch, RESOLUTION).onnx_bytes


def synthetic_stack(blocks: int, dim: int = 192, tokens: int = 197, heads: int = 3) -> bytes:
    """``blocks`` pre-norm transformer blocks written with onnx.helper, including the
    ``Shape -> Gather -> Concat -> Reshape`` chains a tracing exporter emits, and a dynamic
    batch."""
    nodes, inits, inputs = [], [], [onnx.helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["batch", tokens, dim])]
    hd = dim // heads

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(name, shape):  # stripped weight: a typed graph input, as zoo.strip_weights does
        inputs.append(onnx.helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def node(op, ins, name, **attrs):
        nodes.append(helper.make_node(op, ins, [name], name=name, **attrs))
        return name

    const("i0", np.array([0], np.int64))
    const("i1", np.array([1], np.int64))
    const("heads", np.array([heads], np.int64))
    const("hd", np.array([hd], np.int64))
    const("dimc", np.array([dim], np.int64))
    const("scale", np.array(hd ** -0.5, np.float32))
    x = "input"
    for b in range(blocks):
        p = f"b{b}_"
        h = node("LayerNormalization", [x, weight(p + "ln1_w", [dim]), weight(p + "ln1_b", [dim])],
                 p + "ln1", axis=-1)
        qkv = node("Add", [node("MatMul", [h, weight(p + "qkv_w", [dim, 3 * dim])], p + "qkv_mm"),
                           weight(p + "qkv_b", [3 * dim])], p + "qkv")
        shp = node("Shape", [h], p + "shape")
        bsz = node("Gather", [shp, "i0"], p + "bsz", axis=0)
        ntok = node("Gather", [shp, "i1"], p + "ntok", axis=0)
        three = const(p + "three", np.array([3], np.int64))
        tgt = node("Concat", [bsz, ntok, three, "heads", "hd"], p + "tgt", axis=0)
        qkv = node("Transpose", [node("Reshape", [qkv, tgt], p + "qkv_r")], p + "qkv_t",
                   perm=[2, 0, 3, 1, 4])
        q, k, v = (node("Gather", [qkv, const(f"{p}sel{j}", np.array(j, np.int64))], f"{p}g{j}",
                        axis=0) for j in range(3))  # scalar index: [3,B,H,T,hd] -> [B,H,T,hd]
        kt = node("Transpose", [k], p + "kt", perm=[0, 1, 3, 2])
        att = node("Softmax", [node("Mul", [node("MatMul", [q, kt], p + "qk"), "scale"],
                                    p + "qk_s")], p + "att", axis=-1)
        o = node("Transpose", [node("MatMul", [att, v], p + "av")], p + "av_t", perm=[0, 2, 1, 3])
        tgt2 = node("Concat", [bsz, ntok, "dimc"], p + "tgt2", axis=0)
        o = node("Reshape", [o, tgt2], p + "av_r")
        o = node("Add", [node("MatMul", [o, weight(p + "proj_w", [dim, dim])], p + "proj_mm"),
                         weight(p + "proj_b", [dim])], p + "proj")
        x = node("Add", [x, o], p + "res1")
        h = node("LayerNormalization", [x, weight(p + "ln2_w", [dim]), weight(p + "ln2_b", [dim])],
                 p + "ln2", axis=-1)
        h = node("Add", [node("MatMul", [h, weight(p + "fc1_w", [dim, 4 * dim])], p + "fc1_mm"),
                         weight(p + "fc1_b", [4 * dim])], p + "fc1")
        h = node("Mul", [node("Mul", [h, const(p + "half", np.array(0.5, np.float32))], p + "gh"),
                         node("Add", [node("Erf", [node("Div", [h, const(
                             p + "sqrt2", np.array(1.4142135, np.float32))], p + "gd")], p + "ge"),
                             const(p + "one", np.array(1.0, np.float32))], p + "ga")], p + "gelu")
        h = node("Add", [node("MatMul", [h, weight(p + "fc2_w", [4 * dim, dim])], p + "fc2_mm"),
                         weight(p + "fc2_b", [dim])], p + "fc2")
        x = node("Add", [x, h], p + "res2")
    nodes[-1].output[0] = "output"
    graph = helper.make_graph(nodes, f"synthetic_{blocks}", inputs,
                              [onnx.helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                                ["batch", tokens, dim])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="benchmarks/featurize.py")
    return model.SerializeToString()


def cached(name: str, make) -> bytes | None:
    """Bytes of ``artifacts/bench/NAME.onnx``, created with ``make()`` on first use."""
    path = CACHE / f"{name}.onnx"
    if path.is_file():
        return path.read_bytes()
    t0 = time.perf_counter()
    print(f"  generating {path.relative_to(ROOT)} ...", end=" ", flush=True)
    try:
        data = make()
    except ImportError as e:
        print(f"skipped ({e.name or e} not installed)")
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    print(f"{len(data) / 1024:.0f} KiB in {time.perf_counter() - t0:.1f} s", flush=True)
    return data


# ----------------------------------------------------------------------------------------------
# the measured operations

def run_trappm(data: bytes):
    return trappm_featurize.featurize(data, batch_size=BATCH)


def run_node_features(graph) -> np.ndarray:
    return trappm_features.node_features(graph, "v2")


def run_stages(data: bytes) -> dict[str, float]:
    """featurize()'s three main steps, timed one by one (featurize also runs its own input
    checks and ordering between read_model and infer; the table shows that rest as 'other')."""
    t0 = time.perf_counter()
    model = onnx_io.read_model(data)
    t1 = time.perf_counter()
    inferred = onnx_io.infer(model, BATCH)
    t2 = time.perf_counter()
    trappm_featurize.build_graph(inferred, BATCH, None)
    t3 = time.perf_counter()
    return {"read_model": t1 - t0, "infer": t2 - t1, "build_graph": t3 - t2}


def run_baseline(data: bytes) -> onnx.ModelProto:
    m = onnx.load_from_string(data)
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].dim_value = BATCH
    return onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)


def onnx_tool_inputs(data: bytes) -> dict[str, np.ndarray]:
    """Concrete arrays for the inputs whose first dimension is symbolic (the data inputs)."""
    m = onnx.load_from_string(data)
    out = {}
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            shape = [BATCH] + [d.dim_value for d in dims[1:]]
            dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            out[vi.name] = np.zeros(shape, dtype)
    return out


def run_onnx_tool(data: bytes, inputs: dict[str, np.ndarray]):
    import onnx_tool

    model = onnx_tool.Model(onnx.load_from_string(data), {"verbose": False})
    model.graph.shape_infer(inputs)
    model.graph.profile()
    return model


# ----------------------------------------------------------------------------------------------
# measurement

def _stats(samples: list[float]) -> dict:
    a = np.asarray(samples) * 1e3
    return {"median_ms": float(np.median(a)), "p90_ms": float(np.percentile(a, 90)),
            "min_ms": float(a.min()), "n": int(a.size)}


def measure(name: str, data: bytes, repeat: int, stages: bool, onnx_tool_ok: bool) -> dict:
    """Time every method on one input, interleaved run by run."""
    graph = run_trappm(data)
    tool_inputs = onnx_tool_inputs(data) if onnx_tool_ok else None
    methods = {"trappm_featurize": lambda: run_trappm(data),
               "node_features_v2": lambda: run_node_features(graph),
               "baseline_onnx_infer": lambda: run_baseline(data)}
    if onnx_tool_ok:
        methods["onnx_tool"] = lambda: run_onnx_tool(data, tool_inputs)
    samples: dict[str, list[float]] = {k: [] for k in methods}
    cpu: dict[str, list[float]] = {k: [] for k in methods}
    stage_samples: dict[str, list[float]] = {}
    for i in range(WARMUP + repeat):
        for key, fn in methods.items():
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if i >= WARMUP:
                samples[key].append(dt)
                cpu[key].append(dc)
        if stages:
            gc.collect()
            split = run_stages(data)
            if i >= WARMUP:
                for k, v in split.items():
                    stage_samples.setdefault(k, []).append(v)
    for d in (samples, cpu):
        d["trappm_total"] = [a + b for a, b in zip(d["trappm_featurize"], d["node_features_v2"])]
    res = {"name": name, "nodes": graph.num_nodes, "edges": graph.num_edges,
           "bytes": len(data), "unresolved_shapes": graph.meta.get("unresolved_shapes"),
           # wall clock (perf_counter): what the targets are judged on
           "times": {k: _stats(v) for k, v in samples.items()},
           # CPU time of this process (process_time): less sensitive to other load on the core
           "cpu_times": {k: _stats(v) for k, v in cpu.items()}}
    if stage_samples:
        res["stages"] = {k: _stats(v) for k, v in stage_samples.items()}
    t = res["times"]
    res["ratio_trappm_vs_baseline"] = t["trappm_featurize"]["median_ms"] / \
        t["baseline_onnx_infer"]["median_ms"]
    if "onnx_tool" in t:
        res["ratio_trappm_vs_onnx_tool"] = t["trappm_featurize"]["median_ms"] / \
            t["onnx_tool"]["median_ms"]
    return res


def linear_fit(nodes: list[int], ms: list[float]) -> dict:
    x, y = np.asarray(nodes, float), np.asarray(ms, float)
    b, a = np.polyfit(x, y, 1)
    fit = a + b * x
    ss_res = float(((y - fit) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    dev = y - fit
    worst = int(np.argmax(np.abs(dev)))
    per_k = y / x * 1000
    return {"intercept_ms": float(a), "per_node_us": float(b * 1e3),
            "r2": 1 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "max_dev_ms": float(dev[worst]), "max_dev_pct": float(100 * dev[worst] / fit[worst]),
            "max_dev_at_nodes": int(x[worst]),
            "ms_per_1000_nodes_smallest": float(per_k[0]),
            "ms_per_1000_nodes_largest": float(per_k[-1]),
            "growth_largest_vs_smallest": float(per_k[-1] / per_k[0]),
            "projected_ms_at_5000": float(a + b * NODES_TARGET)}


def profile_featurize(data: bytes, runs: int, top: int) -> str:
    run_trappm(data)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        run_trappm(data)
    prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.strip_dirs().sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


# ----------------------------------------------------------------------------------------------
# report

def _fmt(t: dict | None) -> str:
    return f"{t['median_ms']:9.2f} {t['p90_ms']:9.2f}" if t else f"{'-':>9} {'-':>9}"


def print_table(results: list[dict], onnx_tool_ok: bool) -> None:
    cols = [("trappm_featurize", "featurize"), ("node_features_v2", "node_feat"),
            ("trappm_total", "total"), ("baseline_onnx_infer", "baseline")]
    if onnx_tool_ok:
        cols.append(("onnx_tool", "onnx-tool"))
    head = f"{'input':34} {'nodes':>6} " + " ".join(
        f"{lbl + ' med':>9} {'p90':>9}" for _, lbl in cols)
    head += f" {'/base':>6}" + (f" {'/tool':>6}" if onnx_tool_ok else "") + f" {'total cpu':>9}"
    print(head)
    print("-" * len(head))
    for r in results:
        line = f"{r['name'][:34]:34} {r['nodes']:6d} " + " ".join(
            _fmt(r["times"].get(k)) for k, _ in cols)
        line += f" {r['ratio_trappm_vs_baseline']:6.2f}"
        if onnx_tool_ok:
            line += f" {r.get('ratio_trappm_vs_onnx_tool', float('nan')):6.2f}"
        line += f" {r['cpu_times']['trappm_total']['median_ms']:9.2f}"
        print(line)
    print("(wall ms, median and p90 over the timed runs; total = featurize + node_features; "
          "/base, /tool = trappm featurize median / baseline or onnx-tool median; total cpu = "
          "median process CPU time of total)")
    if any("stages" in r for r in results):
        print()
        print(f"{'featurize split (median wall ms)':34} {'nodes':>6} {'read_model':>10} "
              f"{'infer':>9} {'build_graph':>11} {'other':>7} {'us/node':>8}")
        for r in results:
            s = r.get("stages")
            if not s:
                continue
            e2e = r["times"]["trappm_featurize"]["median_ms"]
            other = e2e - sum(v["median_ms"] for v in s.values())
            print(f"{r['name'][:34]:34} {r['nodes']:6d} {s['read_model']['median_ms']:10.2f} "
                  f"{s['infer']['median_ms']:9.2f} {s['build_graph']['median_ms']:11.2f} "
                  f"{other:7.2f} {1e3 * e2e / r['nodes']:8.1f}")
        print("(infer = onnx_io.infer: input binding, ONNX shape inference, shape folding; other = "
              "featurize median minus the three, i.e. featurize's own checks and ordering, +/- "
              "noise; us/node = featurize median per node)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per method (default 20)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPUs to pin to and math-library threads (default 1)")
    ap.add_argument("--cpu", type=int, default=None,
                    help="first CPU to pin to (default: the last allowed CPU)")
    ap.add_argument("--json", type=Path, default=None, help="write all numbers to this file (JSON)")
    ap.add_argument("--big", default=DEFAULT_BIG,
                    help=f"timm architecture(s), comma-separated, for the large graph (default "
                         f"{DEFAULT_BIG}; needs >= 4,000 nodes)")
    ap.add_argument("--series", choices=("vit", "synthetic"), default="vit",
                    help="node-count series: vit_tiny at several depths (default) or a synthetic "
                         "onnx.helper stack")
    ap.add_argument("--depths", default=None,
                    help=f"series sizes: vit depths (default {DEFAULT_DEPTHS}) or synthetic block "
                         f"counts (default {DEFAULT_SYNTH_BLOCKS})")
    ap.add_argument("--no-stages", dest="stages", action="store_false",
                    help="skip the read_model / infer / build_graph split")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile featurize on the large graph and print the top functions")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    # Inputs first (exports use torch, which is faster unpinned), then pin.
    print(f"inputs (cache {CACHE.relative_to(ROOT)}/):", flush=True)
    inputs: list[tuple[str, str, bytes]] = []  # (group, name, bytes)
    data = cached(f"resnet101_{RESOLUTION}", lambda: _skeleton("resnet101"))
    if data:
        inputs.append(("resnet", f"resnet101@{RESOLUTION}", data))
    for arch in filter(None, args.big.split(",")):
        data = cached(f"{arch}_{RESOLUTION}", lambda arch=arch: _skeleton(arch))
        if data:
            inputs.append(("big", f"{arch}@{RESOLUTION}", data))
    if args.series == "vit":
        sizes = [int(s) for s in (args.depths or DEFAULT_DEPTHS).split(",")]
        for d in sizes:
            data = cached(f"series_{SERIES_ARCH}_d{d}_{RESOLUTION}",
                          lambda d=d: _export_timm(SERIES_ARCH, RESOLUTION, depth=d))
            if data:
                inputs.append(("series", f"{SERIES_ARCH} depth={d}", data))
    else:
        sizes = [int(s) for s in (args.depths or DEFAULT_SYNTH_BLOCKS).split(",")]
        for k in sizes:
            data = cached(f"series_synthetic_k{k}", lambda k=k: synthetic_stack(k))
            if data:
                inputs.append(("series", f"synthetic blocks={k}", data))

    allowed = sorted(os.sched_getaffinity(0))
    first = args.cpu if args.cpu is not None else allowed[-max(1, args.threads)]
    cpus = set(range(first, first + max(1, args.threads))) & set(allowed) or {allowed[-1]}
    os.sched_setaffinity(0, cpus)
    try:
        import onnx_tool  # noqa: F401
        onnx_tool_version = getattr(onnx_tool, "VERSION", None) or "?"
        onnx_tool_ok = True
    except ImportError:
        onnx_tool_version, onnx_tool_ok = None, False
    load = os.getloadavg()
    env = {"python": platform.python_version(), "onnx": onnx.__version__,
           "numpy": np.__version__, "onnx_tool": onnx_tool_version,
           "cpu_affinity": sorted(cpus), "threads": _THREADS, "cpu_count": os.cpu_count(),
           "loadavg_1m_5m_15m": [round(x, 2) for x in load], "batch_size": BATCH,
           "repeat": args.repeat, "warmup": WARMUP, "machine": platform.machine(),
           "processor": _cpu_model()}
    print(f"\npinned to CPU {sorted(cpus)}, {_THREADS} thread(s); {env['processor']}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} over {os.cpu_count()} CPUs")
    print(f"onnx {onnx.__version__}, numpy {np.__version__}, "
          + (f"onnx-tool {onnx_tool_version}" if onnx_tool_ok else "onnx-tool: not installed"))
    print(f"batch {BATCH}, {WARMUP} warm-ups + {args.repeat} timed runs per method, interleaved\n",
          flush=True)

    results = []
    for group, name, data in inputs:
        print(f"  timing {name} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        r = measure(name, data, args.repeat, args.stages, onnx_tool_ok)
        r["group"] = group
        results.append(r)
        print(f"{r['nodes']} nodes, {time.perf_counter() - t0:.1f} s", flush=True)
    print()
    print_table(results, onnx_tool_ok)

    bigs = [r for r in results if r["group"] == "big"]
    for big in bigs:
        note = "" if big["nodes"] >= 4000 else "  (below 4,000: pick a larger --big)"
        print(f"\nlarge graph: {big['name']} has {big['nodes']} nodes, {big['edges']} edges{note}")

    report = {"env": env, "results": results, "targets": {}}
    series = [r for r in results if r["group"] == "series"]
    fit = None
    if len(series) >= 3:
        series.sort(key=lambda r: r["nodes"])
        fit = linear_fit([r["nodes"] for r in series],
                         [r["times"]["trappm_total"]["median_ms"] for r in series])
        report["linearity"] = {"metric": "trappm_total median", **fit,
                               "points": [[r["nodes"], r["times"]["trappm_total"]["median_ms"]]
                                          for r in series]}
        if args.stages:
            report["linearity_stages"] = {
                k: linear_fit([r["nodes"] for r in series],
                              [r["stages"][k]["median_ms"] for r in series])
                for k in series[0]["stages"]}
        print(f"\nlinearity over {len(series)} graphs, {series[0]['nodes']}..{series[-1]['nodes']} "
              "nodes (featurize + node_features, medians):")
        print(f"  time = {fit['intercept_ms']:.2f} ms + {fit['per_node_us']:.1f} us/node   "
              f"R^2 = {fit['r2']:.4f}")
        print(f"  max deviation from fit: {fit['max_dev_ms']:+.2f} ms ({fit['max_dev_pct']:+.1f}%)"
              f" at {fit['max_dev_at_nodes']} nodes")
        print(f"  per 1,000 nodes: {fit['ms_per_1000_nodes_smallest']:.1f} ms at "
              f"{series[0]['nodes']} nodes, {fit['ms_per_1000_nodes_largest']:.1f} ms at "
              f"{series[-1]['nodes']} nodes (x{fit['growth_largest_vs_smallest']:.2f}; "
              "~1 means no super-linear growth)")
        cfit = linear_fit([r["nodes"] for r in series],
                          [r["cpu_times"]["trappm_total"]["median_ms"] for r in series])
        report["linearity_cpu"] = cfit
        print(f"  same on CPU time: {cfit['intercept_ms']:.2f} ms + {cfit['per_node_us']:.1f} "
              f"us/node, R^2 = {cfit['r2']:.4f}, per 1,000 nodes "
              f"{cfit['ms_per_1000_nodes_smallest']:.1f} -> {cfit['ms_per_1000_nodes_largest']:.1f}"
              " ms")
        for k, f in report.get("linearity_stages", {}).items():
            print(f"  {k:12} {f['per_node_us']:7.1f} us/node  R^2 {f['r2']:.4f}  "
                  f"per 1k nodes {f['ms_per_1000_nodes_smallest']:.1f} -> "
                  f"{f['ms_per_1000_nodes_largest']:.1f} ms")

    print("\ntargets (trappm total = featurize + node_features, median wall time, batch 32, one "
          "core; [cpu: the same on process CPU time])")
    targets = report["targets"]
    res = next((r for r in results if r["group"] == "resnet"), None)
    if res:
        targets["resnet101_b32"] = _target(
            f"ResNet-101 b32 ({res['nodes']} nodes)", res["times"]["trappm_total"]["median_ms"],
            res["cpu_times"]["trappm_total"]["median_ms"], RESNET_TARGET_MS)
    if fit:
        targets["nodes5000_fitted"] = _target(
            "5,000 nodes, series fit a + b * 5,000", fit["projected_ms_at_5000"],
            report["linearity_cpu"]["projected_ms_at_5000"], NODES_TARGET_MS)
    for big in bigs:
        limit = NODES_TARGET_MS * big["nodes"] / NODES_TARGET
        t = _target(f"{big['name']} measured ({big['nodes']} nodes; budget 300 ms x nodes/5,000)",
                    big["times"]["trappm_total"]["median_ms"],
                    big["cpu_times"]["trappm_total"]["median_ms"], limit)
        t.update(nodes=big["nodes"], ms_scaled_to_5000=t["ms"] * NODES_TARGET / big["nodes"])
        targets[f"large_graph_measured:{big['name']}"] = t
    if load[0] > 0.5 * (os.cpu_count() or 1):
        print(f"  note: load average {load[0]:.1f} on {os.cpu_count()} CPUs: other work shares "
              "this core, so these times are inflated")

    if args.profile and bigs:
        runs = 3
        print(f"\ncProfile of featurize on {bigs[0]['name']} ({runs} runs):")
        data = next(d for g, _, d in inputs if g == "big")
        text = profile_featurize(data, runs, 25)
        print(text)
        report["profile_text"] = text

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


def _target(label: str, ms: float, cpu_ms: float, limit: float) -> dict:
    ok, cpu_ok = ms <= limit, cpu_ms <= limit
    print(f"  {'PASS' if ok else 'FAIL'}  {label}: {ms:.1f} ms (limit {limit:.0f} ms)  "
          f"[cpu {cpu_ms:.1f} ms: {'PASS' if cpu_ok else 'FAIL'}]")
    return {"ms": ms, "limit_ms": limit, "pass": ok, "cpu_ms": cpu_ms, "pass_cpu": cpu_ok}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


if __name__ == "__main__":
    sys.exit(main())
