"""A prediction in words and pictures: the report ``trappm-ray predict`` prints, the table that
compares devices, the device listing, the batch sweep's plot and ``trappm-ray plan``'s."""
from __future__ import annotations

from trappm_ray.serving.prediction import Prediction


def _fmt(e) -> str:
    return f"{e.value:10.2f} {e.unit:<3} [{e.low:.2f}, {e.high:.2f}]" if e else "         -"


def _money(amount: float) -> str:
    """Cents where there are any, else three figures (a hundred steps may cost a fraction of one)."""
    return f"{amount:10.2f}" if amount >= 1 else f"{amount:10.3g}"


def print_report(p: Prediction, sweep_rows: list[dict] | None = None, plot: str | None = None) -> None:
    """The human-readable report: one summary line, one table of predictions, then the derived
    quantities."""
    dev = p.device
    print(p.summary() + "\n")
    print(f"model      {p.model}" + (f"  (sha256 {p.model_sha256[:12]})" if p.model_sha256 else ""))
    if "blocks" in p.graph:  # a transformers config laid out over GPUs (no one graph answers)
        print(f"graph      {p.graph['blocks']} blocks, {p.graph['seq']} tokens a sequence")
    else:
        print(f"graph      {p.graph.get('nodes')} nodes, {p.graph.get('macs', 0) / 1e9:.3g} GMACs, "
              f"{p.graph.get('params', 0) / 1e6:.3g} M params")
    band = "interval: " + p.interval.replace("interval_z", f"{p.interval_z:g}")
    print(f"predictor  {p.model_version}  device {dev.get('name', '?')} ({dev.get('kind')})  {band}")
    print(f"batch size {p.batch_size}\n")
    gpus = (p.distributed or {}).get("gpus", 1)
    per_gpu = " per GPU" if gpus > 1 else ""  # every GPU of a layout draws about what one does
    rows = [("training step time", _fmt(p.train_step_ms)),
            ("training memory", _fmt(p.train_memory_mb)),
            (f"training power{per_gpu}", _fmt(p.train_power_w)) if p.train_power_w else None,
            ("inference latency", _fmt(p.inference_ms)),
            ("training throughput", f"{p.throughput_samples_s:10.1f} samples/s") if p.train_step_ms else None,
            ("inference throughput", f"{p.inference_samples_s:10.1f} samples/s") if p.inference_ms else None,
            ("smallest GPU or MIG slice", f"{p.smallest_profile or 'none fits'}"
             + (f"  (next: {p.runner_up_profile}; upper end of the memory interval)" if p.runner_up_profile else ""))
            if p.train_memory_mb and p.gpu_profiles else None]
    if p.max_batch_size is not None:
        rows.append((f"largest batch <= {p.memory_budget_mb:g} MB", f"{p.max_batch_size:10d}"))
    if p.power:
        low, high = p.power.get("inference_power_interval_w") or (None, None)
        band = f"   [{low:.2f}, {high:.2f}]" if low is not None else ""
        if gpus > 1 and p.power.get("total_train_power_w") is not None:
            rows.append((f"training power, {gpus} GPUs", f"{p.power['total_train_power_w']:10.2f} W"))
        if p.power.get("inference_power_w") is not None:  # a layout answers training alone
            rows.append(("inference power", f"{p.power['inference_power_w']:10.2f} W{band}"))
        if p.power.get("energy_per_step_j") is not None:
            rows.append(("energy per training step" if gpus == 1 else f"energy per step, {gpus} GPUs",
                         f"{p.power['energy_per_step_j']:10.3g} J"))
    if p.training_cost:
        c = p.training_cost
        rows.append((f"{c.steps} steps", f"{c.hours:10.3g} h"))
        if c.cost is not None:
            rows.append((f"  at {c.price_per_hour:g} per GPU-hour", _money(c.cost)))
        if c.energy_kwh is not None:
            rows.append(("  energy", f"{c.energy_kwh:10.3g} kWh"))
        if c.energy_cost is not None:
            rows.append((f"  at {c.price_per_kwh:g} per kWh", _money(c.energy_cost)))
    print(f"  {'quantity':<28} prediction")
    for row in filter(None, rows):
        print(f"  {row[0]:<28}{row[1]}")
    opts = ", ".join(f"{k} {v}" for k, v in p.options.items() if v is not None)
    print(f"\nsetting: {opts}")
    if p.graph.get("batch_rebound"):
        print(f"note: the file's fixed batch {p.graph.get('exported_batch')} was re-bound to "
              f"{p.batch_size}")
    floor = p.floors.get("train_memory_mb")
    if floor:
        print(f"training memory floor (weights + gradients + optimizer state + largest tensor): {floor:.1f} MB")
    print(f"similarity to the training graphs: {p.domain.get('note', 'not assessed')}")
    for note in p.notes:
        print(f"note: {note}")
    if p.layers:
        basis = "GPU time" if p.device.get("kind") in ("cuda", "rocm") else "MACs"
        print(f"\n  {'layer':<40}{'share of ' + basis:>18}{'params (M)':>12}{'GMACs':>10}{'activations MB':>16}")
        for r in p.layers:
            print(f"  {r['layer'][-39:]:<40}{100 * r['share']:>17.1f}%{r['params'] / 1e6:>12.3g}"
                  f"{r['macs'] / 1e9:>10.3g}{r['activation_mb']:>16.4g}")
    for warning in p.warnings:
        print(f"WARNING: {warning}")
    if dev.get("kind") == "cpu":
        print("note: a CPU predictor: times, memory and power are for that CPU")
    if sweep_rows:
        print(f"\n  {'batch':>6} {'step ms':>10} {'memory MB':>10} {'infer ms':>10} {'samples/s':>10}")
        for r in sweep_rows:
            print(f"  {r['batch_size']:>6} {r['train_step_ms'] or 0:>10.2f} "
                  f"{r['train_memory_mb'] or 0:>10.1f} {r['inference_ms'] or 0:>10.2f} "
                  f"{r['throughput_samples_s'] or 0:>10.1f}")
        print(f"\nplot written to {plot}")


def plot_sweep(rows: list[dict], path: str, title: str) -> None:
    """Step time, memory and throughput against batch size, intervals shaded."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    b = [r["batch_size"] for r in rows]
    for ax, key, label in zip(axes, ("train_step_ms", "train_memory_mb", "throughput_samples_s"),
                              ("training step (ms)", "training memory (MB)", "samples / s")):
        ax.plot(b, [r[key] for r in rows], marker="o")
        if key in rows[0]["interval"]:
            ax.fill_between(b, [r["interval"][key][0] for r in rows],
                            [r["interval"][key][1] for r in rows], alpha=0.25)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_layouts(rows: list[dict], path: str, title: str, memory_gb: float | None, top: int = 10) -> None:
    """``trappm-ray plan``'s picture, from its layouts' ``to_dict()`` (fastest first): iteration
    time against memory per GPU for every layout, and where the iteration goes for the first ``top``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    def name(r: dict) -> str:
        return f"tp{r['tp']} pp{r['pp']} dp{r['dp']}" + (f" z{r['zero']}" if r["zero"] else "") + f" mb{r['micro_batch']}"

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5), gridspec_kw={"width_ratios": [1, 1.3]})
    for fits, colour in ((True, "tab:blue"), (False, "tab:gray")):
        some = [r for r in rows if r["fits"] == fits]
        left.scatter([r["memory_gb_per_gpu"] for r in some], [r["iteration_ms"] / 1e3 for r in some], s=14,
                     c=colour, label="fits" if fits else "does not fit")
    if rows:
        best = rows[0]
        left.annotate(f"first: {name(best)}", (best["memory_gb_per_gpu"], best["iteration_ms"] / 1e3), fontsize=8,
                      xytext=(20, 25), textcoords="offset points", arrowprops={"arrowstyle": "->"})
    if memory_gb:
        left.axvline(memory_gb, color="tab:red", lw=1, ls="--", label=f"GPU memory {memory_gb:g} GB")
    left.set(xlabel="memory per GPU (GB)", ylabel="iteration (s)", yscale="log")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    first = rows[:top][::-1]
    start = [0.0] * len(first)
    for part in first[0]["where_ms"] if first else []:
        widths = [r["where_ms"][part] / 1e3 for r in first]
        right.barh([name(r) for r in first], widths, left=start, label=part)
        start = [a + b for a, b in zip(start, widths)]
    right.set(xlabel="where the iteration goes on the last stage's GPUs (s)")
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_comparison(label: str, batch_size: int, names: list[str], results: list) -> None:
    """One row per device: step, throughput, memory with its upper end, power, whether it fits."""
    print(f"{label} at batch {batch_size}\n")
    print(f"  {'device':<28}{'step ms':>10}{'samples/s':>12}{'memory GB (high)':>19}{'power W':>9}  fits")
    nan = float("nan")
    for n, r in zip(names, results):
        if not isinstance(r, Prediction):
            print(f"  {n:<28}error: {r}")
            continue
        m, step, power = r.train_memory_mb, r.train_step_ms, r.train_power_w
        fits = r.device.get("memory_gb") and m and m.high / 1024 <= r.device["memory_gb"]
        print(f"  {(r.device.get('name') or n)[:27]:<28}{step.value if step else nan:>10.3g}"
              f"{r.throughput_samples_s or 0:>12,.0f}{m.value / 1024 if m else nan:>10.3g} "
              f"({m.high / 1024 if m else nan:.3g}){power.value if power else nan:>9.0f}  "
              f"{'yes' if fits else 'no' if r.device.get('memory_gb') else '-'}")


__all__ = ["print_report", "print_comparison", "plot_sweep", "plot_layouts"]


def print_devices(listing: dict) -> None:
    """``trappm-ray devices`` in words (:func:`trappm_ray.serving.routing.device_listing`)."""
    spec_info = listing["spec_predictor"]
    print("shipped predictors (trappm-ray predict MODEL --device DEVICE):")
    for d in listing["predictors"]:
        opts = ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in (d["options"] or {}).items())
        filled = f" (+ {', '.join(d['filled_by_spec'])} from gpu-spec)" if d.get("filled_by_spec") else ""
        print(f"  {d['device']:<30} {d['kind'] or '?':<5} {d['labels']} labels; targets "
              f"{', '.join(d['targets'] or [])}{filled}; {opts}")
    if spec_info:
        err = ", ".join(f"{t} {v:.0f}%" for t, v in spec_info["lodo_mape"].items() if v is not None)
        print(f"\nspec-based predictor gpu-spec (any other GPU of the table, or --device-spec FILE.json):"
              f"\n  trained on {spec_info['trained_on']['rows']} rows of "
              f"{len(spec_info['trained_on']['devices'])} devices ({', '.join(spec_info['trained_on']['devices'])});"
              f"\n  leave-one-device-out MAPE, mean over held-out devices: {err};"
              f"\n  'transfer': in its reference predictor's setting, these targets are that predictor's answer x "
              f"the ratio of roofline floors, or, for a graph that predictor's labels measured (same operators, "
              f"edges and parameters, a batch within 2x), that measurement x the same ratio (docs/predict.md)")
    specs = listing["specs"]
    print(f"\ndevice spec table ({len(specs)} devices, data/devices.csv; predictor, GPU/MIG fit, roofline):")
    for d in specs:
        mig = f"MIG {' '.join(d['mig_profiles'])}" if d["mig_profiles"] else ""
        moved = sorted(set(d["transfer"].values()))
        via = f"transfer from {moved[0]} ({', '.join(d['transfer'])})" if moved else ""
        print(f"  {d['slug']:<30} {d['kind']:<5} {str(d['memory_gb'] or '?') + ' GB':<9} "
              f"{d['predictor'] or '-':<13} {mig} {via}".rstrip())
