"""``docs/results.md`` from the evaluation report (``results.json``): tables, plots, times."""
from __future__ import annotations

import os

from trappm_ray.evaluate.config import EvalConfig

SPLIT_TITLES = {
    "random": "Per-family random 70:30 split (the published protocol)",
    "arch": "Held-out architectures: 30% of each family's architectures, all their rows, in test",
    "family": "Leave one family out: each family in turn is the whole test set",
}
MODEL_NOTES = {
    "trappm-ray": "this project: v2 features, log-scaled target, pretrained frozen encoder",
    "trappm-published": "the published recipe: trappm-v1 features (unscaled), SAGEConv outputs "
                        "L2-normalised per node and a -logsigmoid output as in the published "
                        "code, raw target + MSE, static features z-scored within each graph, "
                        "v1-pretrained encoder (this evaluation's batch size and epoch choice; "
                        "experiments/published_recipe.py runs batch 1, epoch by training loss)",
    "nnlqp": "NNLQP-style supervised GNN: trappm-ray without the pretrained embedding",
    "random-encoder": "ablation: trappm-ray with a frozen randomly initialised encoder",
    "mlp": "MLP on the 9 static features (log target)",
    "xgboost": "XGBoost on the 9 static features (log target, depth chosen on validation)",
    "analytic": "analytic memory estimate x one factor fitted on train (memory only)",
}


def command(config: dict, script: str = "jobs/evaluate.py", cls=None) -> str:
    """The ``script`` command line that reproduces ``config`` (its non-default fields), where
    ``cls`` is the script's config dataclass (default: :class:`~trappm_ray.evaluate.config.EvalConfig`)."""
    from dataclasses import asdict

    listed = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731 - JSON has lists
    default = {k: listed(v) for k, v in asdict((cls or EvalConfig)()).items()}
    flags = []
    for key, value in config.items():
        value = listed(value)
        if key in default and value != default[key]:
            text = (",".join(map(str, value)) if isinstance(value, list)
                    else str(value).lower() if isinstance(value, bool) else str(value))
            flags.append(f"--{key.replace('_', '-')} {text}")
    return " ".join([f"python {script}", *flags])


def regenerate_lines(meta: dict) -> list[str]:
    """How to rebuild the results from a fresh checkout: corpus, encoders (from the config each
    encoder's sidecar recorded), then the evaluation."""
    from trappm_ray.train.pretrain import PretrainConfig

    encoders = meta.get("encoders", {})
    corpora = sorted({e["config"]["corpus"] for e in encoders.values() if "config" in e})
    lines = ["```bash"]
    # the corpus must hold a graph for every label: --labels exports the labeled architectures;
    # an encoder pretrained on the label directory's own joined graphs needs no corpus build
    lines += [f"python jobs/build_dataset.py --out {c} --labels {meta['config']['labels']}"
              for c in corpora if c != meta["config"]["labels"]]
    for name, enc in encoders.items():
        if "config" in enc:
            lines.append(command(enc["config"], "jobs/pretrain_gae.py", PretrainConfig))
        else:
            lines.append(f"# {name} encoder: its sidecar does not record how it was pretrained "
                         f"({enc.get('max_graphs')} graphs, {enc.get('epoch')} epochs, dims "
                         f"{enc.get('dims')})")
    return lines + [command(meta["config"]), "```"]


def _cell(m: dict | None) -> str:
    return "-" if m is None else f"{m['mape']:.1f} ({m['rmse']:.3g})"


def _table(split_res: dict, target: str) -> list[str]:
    models = [m for m in split_res if target in split_res[m]]
    fams = sorted({f for m in models for f in split_res[m][target]["families"]})
    lines = ["| family | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for fam in fams:
        lines.append(f"| {fam} | " + " | ".join(
            _cell(split_res[m][target]["families"].get(fam)) for m in models) + " |")
    best = min(models, key=lambda m: split_res[m][target]["mean"]["mape"])
    lines.append("| **mean over families** | " + " | ".join(
        (f"**{_cell(split_res[m][target]['mean'])}**" if m == best else _cell(split_res[m][target]["mean"]))
        for m in models) + " |")
    return lines


def _neighbour_line(summary: dict | None) -> list[str]:
    if not summary:
        return []
    parts = [f"`{t}` {s['mean']:.1f}% mean / {s['median']:.1f}% median ({s['rows']} rows)"
             for t, s in sorted(summary.items())]  # the JSON report sorts its keys
    return ["* how irregular the labels are: a row interpolated from the same architecture's two "
            "neighbouring batch sizes (log-log line; it sees labels of the row's own architecture, "
            "so it is a yardstick, not a model) misses by " + "; ".join(parts)]


def write_markdown(report: dict, path: str, plots: list[str], out_dir: str) -> None:
    meta, results = report["meta"], report["results"]
    cfg = meta["config"]
    out = [
        "# Results",
        "",
        f"Generated by `{command(cfg)}` (do not edit by hand; the numbers are in "
        "`results.json`).",
        "",
        f"* device: `{meta['device']}`; {meta['examples']} labeled examples, "
        f"{meta['architectures']} architectures, families: {', '.join(meta['families'])}",
        f"* data sha256 (labels + joined graphs): `{meta['data_sha256_16']}`; code `{meta['code_version']}`; "
        f"{meta['date']}; wall time {meta['wall_s'] / 60:.1f} min",
        f"* targets: {', '.join(meta['targets'])}; `train_memory_mb` on CPU is the peak resident "
        "memory above the process's idle baseline (see docs/labels.md)",
        f"* random split: seeds {', '.join(map(str, cfg['seeds']))} (GNN baselines: the first "
        f"{cfg['baseline_seeds']}); held-out architectures: the first {cfg['arch_seeds']} seeds; "
        + ("leave-one-family-out: one fold per family; " if "family" in cfg["splits"] else
           "leave-one-family-out: not run; ")
        + "GNN epochs capped at "
        f"{cfg['max_epochs'] or 'the recipe default'}",
        *_neighbour_line(meta.get("neighbour_interpolation")),
        "* cells: MAPE % (RMSE in the target's unit); per-family values are means over the seeds "
        "whose test set holds that family; the last row is the mean over families (the paper's "
        "average); bold = lowest mean MAPE",
        "",
        "Models:",
        "",
    ]
    out += [f"* `{m}`: {MODEL_NOTES.get(m, '')}" for m in cfg["models"]]
    out += ["", "To regenerate everything from a fresh checkout (each command resumes):", "",
            *regenerate_lines(meta)]
    for kind in ("random", "arch", "family"):
        if kind not in results:
            continue
        out += ["", f"## {SPLIT_TITLES[kind]}", ""]
        for target in meta["targets"]:
            if any(target in r for r in results[kind].values()):
                out += [f"### {target}", ""] + _table(results[kind], target) + [""]
    out += ["## Training time", "",
            "Sum of task seconds over seeds/folds and targets (tasks ran in parallel, one CPU each).",
            "", "| split | model | seconds |", "|---|---|---|"]
    for kind, by_model in results.items():
        for model, by_target in by_model.items():
            out.append(f"| {kind} | {model} | {sum(r['train_s'] for r in by_target.values()):.0f} |")
    if plots:
        out += ["", "## Predicted vs measured (trappm-ray, random split, test rows of all seeds)", ""]
        out += [f"![{os.path.basename(p)}]({os.path.relpath(p, out_dir)})" for p in sorted(plots)]
    if report.get("finetune"):
        out += ["", "## Transfer learning: fine-tuning to another device", ""] + report["finetune"]["markdown"]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


__all__ = ["write_markdown"]
