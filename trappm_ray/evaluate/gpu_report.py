"""``docs/results-gpu.md`` from the report of :func:`trappm_ray.evaluate.gpu.run_gpu_evaluation`."""
from __future__ import annotations


def _table(by_model: dict) -> list[str]:
    lines = ["| model | MAPE % | mean over families % | median APE % | raw < floor | after clamp "
             "| 95% coverage | test rows (folds) |", "|---|---|---|---|---|---|---|---|"]
    return lines + [f"| {m} | {r['mape']:.1f} | {r['family_mape']:.1f} | {r['median_ape']:.1f} | "
                    f"{r['raw_below_floor']:.1%} | {r['pred_below_floor']:.0%} | {r['coverage95']:.1%} | "
                    f"{r['n_test']} ({r['folds']}) |" for m, r in by_model.items()]


def markdown(report: dict) -> str:
    """The markdown report (``docs/results-gpu.md``) of one evaluation report dict."""
    meta = report["meta"]
    cfg = meta.get("config", {"seeds": "?", "family_folds": "?"})
    out = ["# GPU results: step time and inference latency against the roofline floor", "",
           f"Generated {meta['created']} by `python jobs/evaluate_gpu.py` in {meta['wall_s']} s "
           "(`trappm_ray/evaluate/gpu.py`; numbers in `docs/results-gpu.json`). Models: `roofline` = "
           "the per-node roofline floor (`trappm_ray/physics/roofline.py`); `roofline-eff` = floor x one "
           "efficiency per device fitted on the training rows; `xgboost`/`mlp` = static features + "
           "device spec vector + log roofline terms + run settings, predicting log(measured / floor); "
           "`xgboost-rel` = the same on the spec-based predictor's feature design (derived device ratios "
           "instead of absolute spec figures, `trappm_ray/model/spec_model.py`); `ensemble` = per row the geometric mean "
           "of the learned models (xgboost, xgboost-rel, mlp, gnn where run) within a factor 2 of their median "
           "(a member extrapolating far off sits that row out), banded from its own validation "
           "residuals, `ensemble-median` their median (log space); `transfer` (leave-one-device-out) = reference transfer (`trappm_ray/evaluate/gpu_floor_ratio.py`), "
           "its reference regressor cross-fitted so that no test architecture is among its rows (a model new "
           "to every device); `transfer-seen` = the same fitted on all the reference's rows, as every other "
           "model of a leave-one-device-out split sees each architecture on the other devices; `transfer-measured` = "
           "the reference's own measurement of the same architecture, resolution and settings (at the labeled batch "
           "nearest the test row's) moved the same way: the device change alone, on the rows whose key the reference "
           "measured; `transfer-anchored` = what the product answers for a GPU without labels: `transfer-measured` where "
           "the reference measured the key, else `transfer`; "
           "`encoder-recipe` (where the GNN runs) = the CPU predictor's recipe (pretrained GAE "
           "encoder, log of the measured time, no roofline input); `gnn` "
           "(where run) = the shipped GPU predictors' recipe without the pretrained encoder (the RTX 3090's "
           "reads it too since 2026-11-30, `docs/training.md`): the supervised GraphSAGE recipe `nnlqp` on v2 node "
           "features + per-node roofline features, same graph-level inputs and target"
           + (", trained also on the device's rows of its other target (none of a validation or test "
              "architecture)" if cfg.get("gnn_auxiliary") else "") + ", each network blended in log space "
           "with a static MLP fitted beside it on the target's rows (the GNN's share "
           f"{cfg.get('gnn_share', 'chosen on the validation rows')}, `trappm_ray/model/static_mlp.py`), the mean of "
           f"{cfg.get('gnn_seeds', 1)} seeds' blends as a shipped predictor answers; `gnn-val-share` = the same "
           "blend with the share chosen on each split's validation rows; `gnn-alone` = the same networks without the MLP "
           "(`trappm_ray/train/gpu_predictor.py`, `trappm_ray/evaluate/gpu_gnn.py`). "
           "Every prediction is clamped to >= the floor ('after clamp' is therefore 0); 'raw < floor' "
           "is the share of predictions below it before clamping. 95% intervals are split-conformal "
           "from the validation residuals. MAPE pools every test prediction of every fold. Splits "
           "(`trappm_ray/train/splits.py`): `random` (per family 70:30 by row) and `arch` (30% of each "
           f"family's architectures held out) with seeds {cfg['seeds']}; `family` = leave families out "
           f"({cfg['family_folds']} folds, the families dealt largest first into groups held out together; "
           "0 = one fold per family). Validation (early stopping, interval calibration): 15% of the training "
           "side, split the same way (rows, architectures, or families).", "",
           "## Rows used (ok label rows, single GPU; joined to a graph or not)", "",
           "| device / target | ok rows | used | no graph | graph, no roofline (peak not sourced) |",
           "|---|---|---|---|---|"]
    out += [f"| {k} | {v['ok_rows']} | {v['with_graph']} | {v['without_graph']} | {v['no_roofline']} |"
            for k, v in meta["rows"].items() if v["ok_rows"]]
    out += ["", "## Measured against the floor", "", "Ratio measured / roofline floor per row. Rows below 1 "
            "mean the floor counted work the run did not do (or a peak in `data/devices.csv` is low).", "",
            "| device / target | rows | below floor | min | median | max |", "|---|---|---|---|---|---|"]
    out += [f"| {k} | {v['n']} | {v['below']} | {v['min']:.2f} | {v['median']:.2f} | {v['max']:.2f} |"
            for k, v in report["floor_check"].items()]
    for key, task in report["tasks"].items():
        out += ["", f"## {key}", "", f"{task['rows']} rows, {task['architectures']} architectures, "
                f"{task['families']} families; measured below the floor: {task['measured_below_floor']:.1%}."]
        if task.get("gnn_blend_weights"):
            out += ["", "The GNN's share of the `gnn-val-share` blend chosen per split, in split order: "
                    + ", ".join(f"{kind} {w}" for kind, w in task["gnn_blend_weights"]) + "."]
        for kind, by_model in task["splits"].items():
            out += ["", f"### split: {kind}", ""] + _table(by_model)
    lodo = report["lodo_inference"]
    out += ["", "## Inference, leave one device out", "",
            f"{lodo['rows']} inference rows with graphs; the held-out device's rows are the test set, "
            "validation is 15% of the other devices' architectures. '(settings seen)': the same "
            "predictions scored on the held-out rows whose run settings (torch.compile, memory format, "
            "torch 2, precision) some training row of the same device kind shares."]
    for spec, by_model in lodo["devices"].items():
        out += ["", f"### held out: {spec}", ""] + _table(by_model)
    return "\n".join(out) + "\n"


__all__ = ["markdown"]
