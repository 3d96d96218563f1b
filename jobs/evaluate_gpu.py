"""Evaluate step time and inference latency on the public GPU labels against the roofline floor
and regenerate docs/results-gpu.md and docs/results-gpu.json.

    python jobs/evaluate_gpu.py                  # ~80 min on 2 cores, ~14 GB: run it alone
    python jobs/evaluate_gpu.py --encoder-from trappm_ray/predictors/default   # + the CPU recipe
    python jobs/evaluate_gpu.py --slugs rtx3090-amp,rtx4090-amp --seeds 1337,1338 --models roofline,roofline-eff,xgboost
Label rows join graphs from data/labels/graphs.parquet and --corpora (default artifacts/corpus-gpu);
rows without a graph are counted, not used. The GNN's networks (every split's at once) are Ray
tasks on a private local cluster; everything else runs in this process.
"""
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate.gpu import GpuEvalConfig, run_gpu_evaluation

if __name__ == "__main__":
    cfg = parse_config(GpuEvalConfig, description=__doc__)
    report = run_gpu_evaluation(cfg)
    for key, task in report["tasks"].items():
        for kind, by_model in task["splits"].items():
            print(f"{key:32s} {kind:7s} " + ", ".join(f"{m} {r['mape']:.1f}%" for m, r in by_model.items()))
    for spec, by_model in report["lodo_inference"]["devices"].items():
        print(f"{'lodo inference ' + spec:32s} " + ", ".join(f"{m} {r['mape']:.1f}%" for m, r in by_model.items()))
    print(f"wall {report['meta']['wall_s']} s -> {cfg.out_md}, {cfg.out_json}")
