"""The ``trappm-ray`` command line.

    trappm-ray graph FILE.onnx --batch-size N [--feature-set v2] [--resolution R] [--json]
    trappm-ray predict FILE.onnx [--batch-size N] [--sweep] [--json] [--predictor URI] ...
    trappm-ray plan CONFIG --gpus N --device GPU --global-batch B --seq S [--plot FILE.png] ...

Bad input exits non-zero with one line on stderr naming the problem; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys

from trappm_ray import errors
from trappm_ray.model import options
from trappm_ray.serving.report import plot_layouts, plot_sweep, print_comparison, print_devices, print_report


def _batch(text: str) -> int | None:
    """``--batch-size``: a positive integer, or ``exported`` for the file's own batch."""
    return None if text == "exported" else int(text)  # the featurizer checks the range


def _dims(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name or not value.isdigit():
            raise argparse.ArgumentTypeError(f"--dim expects NAME=INT, got '{item}'")
        out[name] = int(value)
    return out


def _cluster(args: argparse.Namespace) -> str | None:
    """``--cluster`` as given, or with ``--gpus-per-node`` a change to it (or to the GPU's own)."""
    from trappm_ray.physics.collectives import with_gpus_per_node

    return with_gpus_per_node(args.cluster, args.gpus_per_node)


def cmd_graph(args: argparse.Namespace) -> int:
    from trappm_ray.graph import features
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.physics.floors import gpu_memory_mb
    from trappm_ray.serving.model_input import model_bytes
    from trappm_ray.serving.plan import config_dims

    fs = features.get(args.feature_set)
    data, _ = model_bytes(args.file, args.resolution)  # what predict reads: a file, an s3:// URI, a config, a timm name
    graph = featurize(data, batch_size=args.batch_size, resolution=args.resolution,
                      dims={**config_dims(args.file), **_dims(args.dim)})
    x = features.node_features(graph, fs)
    report = {
        "file": args.file, "feature_set": fs.name, **graph.summary(),
        "node_features": list(x.shape), "static_features": features.static_features(graph, fs).tolist(),
        "unknown_ops": features.unknown_ops(graph, fs), **graph.meta,
        # what `predict --device GPU` answers in the same setting (train_memory_estimate_bytes is a
        # rough feature of the network's input, not an answer)
        "gpu_training_memory_mb": round(gpu_memory_mb(graph, args.precision, args.optimizer)["value"], 1),
        "gpu_training_memory_setting": f"{args.precision} + {args.optimizer} (CUDA memory model)",
    }
    print(json.dumps(report) if args.json else "\n".join(f"{k:>28}: {v}" for k, v in report.items()))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    import warnings

    with warnings.catch_warnings():  # torch / PyG deprecation chatter is not the user's business
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _predict(args)


def _check_device_name(name: str) -> None:
    """Refuse a device nothing answers for before the heavy imports: neither a spelling of a GPU
    in the spec table (``devices.resolve``) nor a shipped predictor's device."""
    import glob
    import os

    from trappm_ray import devices
    from trappm_ray.model.estimator import names_device
    from trappm_ray.model.manifest import Manifest

    try:
        devices.resolve(name)
        return
    except devices.UnknownDevice as e:
        refused = e
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "predictors", "*", "manifest.json")
    for path in glob.glob(here):
        with open(path, encoding="utf-8") as fh:
            if names_device(Manifest.from_json(fh.read()).device, name):
                return
    raise errors.UnsupportedOption(refused.args[0])


def _precheck(args: argparse.Namespace, names: list[str], opts: dict) -> None:
    """The mistakes users make most, answered before the heavy imports (well under a second):
    an option value out of range, a model path that is no file or no ONNX model, a training
    option that only a GPU answers asked of a CPU."""
    import os
    from pathlib import Path

    from trappm_ray import devices
    from trappm_ray.graph.onnx_io import declared_fixed_size, read_model, symbolic_dims
    from trappm_ray.physics.collectives import check_cluster
    from trappm_ray.physics.power import limit_refusal
    from trappm_ray.physics.roofline import precision_refusal
    from trappm_ray.serving.model_input import cached_config, check_timm_name, checked_config, config_file, model_bytes
    from trappm_ray.serving.prediction import PredictOptions

    PredictOptions(args.batch_size, **{**opts, "dims": tuple(sorted(opts["dims"].items()))})
    text = str(args.file)
    path = Path(text)
    config = None if text.startswith("s3://") else config_file(path)
    if text.startswith("s3://"):
        pass
    elif config is not None:  # a transformers config: checked here, exported later, once
        checked_config(config, text)
    elif path.is_file():  # an ONNX file: its options checked against its inputs here; what is wrong
        # with the graph itself (a cycle, control flow, a symbolic dim left open) the prediction's
        # one featurize says, before any answer is computed
        model = read_model(model_bytes(text, args.resolution)[0])
        if args.resolution and (refusal := declared_fixed_size(model, args.resolution)) is not None:
            raise refusal
        named = symbolic_dims(model)
        unknown = sorted(set(opts["dims"]) - named)
        if unknown:
            raise errors.BadOption(f"--dim {unknown[0]}: the model has no input dimension of that name "
                                   f"(its named dimensions: {', '.join(sorted(named)) or 'none'})")
    elif path.exists() or cached_config(text) is not None:
        pass
    elif path.suffix in (".onnx", ".json") or os.sep in text:
        model_bytes(text, args.resolution)  # neither a file nor a cached hub id: says so
    else:
        check_timm_name(text)
    specs = [devices.from_json(args.device_spec)] if args.device_spec else []
    for name in names if args.predictor in (None, "", "default") and not args.device_spec else []:
        try:
            specs.append(devices.resolve(name))
        except devices.UnknownDevice:
            pass  # a shipped CPU predictor's device
    for spec in (s for s in specs if s.kind != "cpu" and len(names) <= 1):  # a comparison: an error row
        refusal = ((args.precision and precision_refusal(spec, args.precision))
                   or (args.power_limit is not None and limit_refusal(spec, args.power_limit)))
        if refusal:
            raise errors.UnsupportedOption(refusal)
    if opts["cluster"]:
        try:
            check_cluster(opts["cluster"])
        except ValueError as e:
            raise errors.UnsupportedOption(str(e)) from None
    step = ["recompute"] * bool(opts.get("recompute")) + ["grad_accum"] * (opts.get("grad_accum") not in (None, 1))
    if step and args.predictor in (None, "", "default") and not args.device_spec:
        try:
            gpu = bool(names) and devices.resolve(names[0]).kind != "cpu"
        except devices.UnknownDevice:
            gpu = False  # a shipped CPU predictor's device
        if not gpu:
            raise errors.UnsupportedOption(f"{step[0]} is answered on GPUs (the step model moves a GPU's answer "
                                           f"to it): name one with --device")


def _compare(args: argparse.Namespace, names: list[str], opts: dict) -> int:
    """``--device a,b,c``: one model on several devices, one table (or one JSON list)."""
    from trappm_ray.serving import api

    results = api.predict_each(args.file, [args.batch_size], names, predictor=args.predictor, parallel=args.parallel,
                               global_batch=args.global_batch, **opts)
    rows = [r.to_dict() if isinstance(r, api.Prediction) else {"device": {"slug": n}, "error": str(r)}
            for n, r in zip(names, results)]
    if args.json:
        print(json.dumps(rows))
    else:
        print_comparison(str(args.file), args.batch_size, names, results)
    return 0


def _predict(args: argparse.Namespace) -> int:
    import os

    names = [d.strip() for d in (args.device or "").split(",") if d.strip()]
    if args.predictor in (None, "", "default") and not args.device_spec:
        for name in names:
            _check_device_name(name)
    setting = dict(precision=args.precision, optimizer=args.optimizer, gpus=args.gpus,
                   memory_format=args.memory_format, recompute=args.recompute or None, grad_accum=args.grad_accum)
    opts = dict(resolution=args.resolution, dims=_dims(args.dim), interval_z=args.interval_z,
                memory_budget_mb=args.memory_budget_mb, steps=args.steps,
                price_per_hour=args.price_per_hour, power_limit_w=args.power_limit,
                price_per_kwh=args.price_per_kwh, layers=args.layers, cluster=_cluster(args), **setting)
    _precheck(args, names, opts)
    if len(names) > 1:
        if args.sweep or args.device_spec:
            raise ValueError("--device with several devices compares them at one batch: without --sweep or --device-spec")
        return _compare(args, names, opts)
    from trappm_ray.serving import api

    predictor = api.load_predictor(args.predictor, args.device, args.device_spec)
    p = api.predict(args.file, args.batch_size, predictor=predictor, parallel=args.parallel,
                    global_batch=args.global_batch, **opts)
    report, sweep_rows, plot = p.to_dict(), None, None
    if args.sweep:  # the same request at each batch (a layout's micro-batch); one a layout cannot hold is left out
        sizes = [2 ** i for i in range(args.sweep_max.bit_length()) if 2 ** i <= args.sweep_max]
        results = api.predict_each(args.file, sizes, [None], predictor=predictor, parallel=args.parallel,
                                   global_batch=args.global_batch, **{**opts, "memory_budget_mb": None, "steps": None, "layers": 0})
        sweep_rows = [r.to_dict() | {"throughput_samples_s": r.throughput_samples_s}
                      for r in results if isinstance(r, api.Prediction)]
        if not sweep_rows:
            raise ValueError("no batch size of the sweep could be featurized")
        stem = os.path.splitext(os.path.basename(str(args.file)))[0] or "model"
        plot = args.plot or f"{stem}-sweep.png"
        plot_sweep(sweep_rows, plot, f"{stem}: {p.model_version} ({p.device.get('name', '?')})")
        keep = ("batch_size", "train_step_ms", "train_memory_mb", "inference_ms", "train_power_w",
                "interval", "throughput_samples_s")
        report["sweep"] = [{k: r[k] for k in keep} for r in sweep_rows]
        report["plot"] = plot
    if args.json:
        print(json.dumps(report))
    else:
        print_report(p, report.get("sweep"), plot)
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    """The shipped predictors (what each was trained on), the spec-based predictor with its
    leave-one-device-out error, and the devices of the spec table."""
    from trappm_ray.serving.routing import device_listing

    listing = device_listing()
    if args.json:
        print(json.dumps(listing))
    else:
        print_devices(listing)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from trappm_ray import devices
    from trappm_ray.serving import plan  # featurize and physics: this command only
    _check_device_name(args.device)
    only = {k: v for k in ("tp", "pp", "dp", "zero", "micro_batch") if (v := getattr(args, k)) is not None}
    answers = plan.plan(args.model, args.gpus, args.device, args.global_batch, args.seq, args.precision,
                        args.optimizer, not args.no_recompute, _cluster(args), only=only)
    title = f"{args.model} on {args.gpus} x {args.device}, global batch {args.global_batch} x {args.seq} tokens"
    rows = [a.to_dict() for a in answers]
    print(json.dumps(rows) if args.json else plan.table(answers, args.top, title))
    if args.plot and rows:
        plot_layouts(rows, args.plot, title, devices.resolve(args.device).memory_gb, args.top)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trappm-ray", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("graph", help="featurize a model and print its graph summary")
    g.add_argument("file", help="what predict reads: an ONNX file, s3:// URI, transformers config or timm name")
    g.add_argument("--batch-size", type=_batch, default=1,
                   help="batch size, or 'exported' for the file's own (default 1)")
    g.add_argument("--resolution", type=int, default=None,
                   help="value for symbolic spatial dims of image inputs")
    g.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="value for a named symbolic input dimension (repeatable)")
    g.add_argument("--feature-set", default="v2", choices=["v1", "trappm-v1", "v2"])
    g.add_argument("--precision", default="amp-fp16", choices=options.PRECISIONS,
                   help="setting of the GPU training memory reported (as predict's default on a GPU)")
    g.add_argument("--optimizer", default="sgd-momentum", choices=options.OPTIMIZERS)
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_graph)

    p = sub.add_parser("predict", help="predict training step time, memory and inference latency")
    p.add_argument("file", help="ONNX file or s3:// URI (a timm name with the zoo extra)")
    p.add_argument("--batch-size", "--micro-batch", type=_batch, default=1,
                   help="batch size (per GPU: a layout's micro-batch), or 'exported' for the file's own (a fixed "
                        "batch is re-bound where sound; default 1)")
    p.add_argument("--resolution", type=int, default=None,
                   help="value for symbolic spatial dims of image inputs")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="value for a named symbolic input dimension (repeatable)")
    p.add_argument("--device", default=None,
                   help="the device as you name it (h100, 3090, 'A100 80GB PCIe'): its shipped predictor, else "
                        "the spec-based one; several, comma-separated (a100,h100,l4), compares them in one "
                        "table; `trappm-ray devices` lists them")
    p.add_argument("--device-spec", default=None, metavar="FILE.json", help="a GPU described by its specs (fields of "
                   "data/devices.csv; required: name, memory_gb, memory_bw_gbs, peak_fp32_tflops): the spec-based predictor")
    p.add_argument("--precision", default=None, choices=options.PRECISIONS,
                   help="training precision (default: what the device's labels used)")
    p.add_argument("--optimizer", default=None, choices=options.OPTIMIZERS,
                   help="optimizer of the training step (default: the labels')")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs: on a GPU, data parallelism at --batch-size per GPU (see --cluster, --parallel)")
    p.add_argument("--parallel", default=None, metavar="dp|fsdp|zero1-3|tp=T,pp=P[,dp=D]",
                   help="the layout over --gpus: dp, fsdp or zero1-3 for any model; tp/pp for a transformers config")
    p.add_argument("--global-batch", type=int, default=None, help="samples per optimizer step over every GPU")
    p.add_argument("--cluster", default=None, metavar="NAME|FILE.json", help="where --gpus run: dgx-a100, dgx-h100, "
                   "hgx-h200, aws-p5, ... (data/clusters.csv) or a JSON file of gpus_per_node, intra_busbw_gbs, inter_gbps")
    p.add_argument("--gpus-per-node", type=int, default=None, metavar="G", help="GPUs a node of --cluster holds "
                   "(default: the cluster's; of the GPU's own cluster without --cluster)")
    p.add_argument("--memory-format", default=None, choices=options.MEMORY_FORMATS)
    p.add_argument("--recompute", action="store_true",
                   help="activation checkpointing of every residual block (GPUs): less memory, a longer step")
    p.add_argument("--grad-accum", type=int, default=None, metavar="N",
                   help="forward/backward passes of --batch-size per optimizer step (GPUs)")
    p.add_argument("--predictor", default=None, help="predictor directory or URI (default: shipped)")
    p.add_argument("--memory-budget-mb", type=float, default=None,
                   help="also report the largest batch size whose training memory fits")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps: their hours, energy (GPUs) and, with the prices, their cost")
    p.add_argument("--price-per-hour", type=float, default=None, help="GPU-hour price, for --steps")
    p.add_argument("--price-per-kwh", type=float, default=None, help="energy price, for --steps")
    p.add_argument("--layers", type=int, nargs="?", const=15, default=0, metavar="N",
                   help="a per-layer breakdown of the N costliest layers (default 15)")
    p.add_argument("--power-limit", type=float, default=None, metavar="W",
                   help="the GPU's power limit in W (default: its TDP); a lower one slows the step")
    p.add_argument("--interval-z", type=float, default=1.96,
                   help="interval half-width in seed-ensemble standard deviations")
    p.add_argument("--sweep", action="store_true",
                   help="also predict batch sizes 1, 2, 4, ... and write a PNG plot")
    p.add_argument("--sweep-max", type=int, default=256)
    p.add_argument("--plot", default=None, help="PNG path of --sweep (default: FILE-sweep.png)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_predict)
    pl = sub.add_parser("plan", help="rank the tensor/pipeline/data parallel layouts of a transformer on N GPUs")
    pl.add_argument("model", help="a transformers config.json, its folder, or a Hugging Face id in the local cache")
    pl.add_argument("--gpus", type=int, required=True)
    pl.add_argument("--device", required=True, help="the GPU, as people name it (a100, h100, ...)")
    pl.add_argument("--global-batch", type=int, required=True, help="sequences per iteration, all GPUs")
    pl.add_argument("--seq", type=int, required=True, help="tokens per sequence")
    pl.add_argument("--cluster", default=None, help="a data/clusters.csv name or JSON file (default: the GPU's first)")
    pl.add_argument("--gpus-per-node", type=int, default=None, metavar="G", help="GPUs a node of the cluster holds")
    pl.add_argument("--precision", default="amp-fp16", choices=options.PRECISIONS)
    pl.add_argument("--optimizer", default="adam", choices=options.OPTIMIZERS)
    pl.add_argument("--no-recompute", action="store_true", help="keep every activation (default: checkpoint blocks)")
    for name in ("tp", "pp", "dp", "zero", "micro-batch"):
        pl.add_argument(f"--{name}", type=int, default=None, help=f"only layouts with this {name}")
    pl.add_argument("--top", type=int, default=10, help="layouts printed (--json prints every one)")
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--plot", default=None, help="PNG path: time vs memory per layout, where the top ones' time goes")
    pl.set_defaults(func=cmd_plan)
    d = sub.add_parser("devices", help="list the shipped predictors and the device spec table")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=cmd_devices)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except errors.ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (argparse.ArgumentTypeError, ValueError, OSError) as e:
        print(f"error: {e.__class__.__name__}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug must still be one line, not a traceback
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        print(f"error: internal ({e.__class__.__name__}): {first}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
