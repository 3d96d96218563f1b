"""Tensor, pipeline and data parallel iterations against vTrain's measured A100 runs (1,440 on one
node, 88 on 64-512 GPUs): docs/results-parallel.md and .json (trappm_ray/evaluate/parallel.py).

    .venv/bin/python jobs/evaluate_parallel.py      (about 2 min; exports 12 GPT shapes once)
"""
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trappm_ray.config_cli import parse_config
from trappm_ray.corpus.text_models import export_text_model
from trappm_ray.evaluate import parallel


@dataclass
class ParallelEvalConfig:
    cache: str = "artifacts/gpt-exports"  # the GPT shapes' ONNX exports, made once
    out: str = "docs/results-parallel"  # .md and .json are written


def exporter(cache: Path):
    def onnx_of(config: dict) -> bytes:
        path = cache / (f"gpt2-h{config['n_embd']}-a{config['n_head']}-l{config['n_layer']}-s{config['n_positions']}"
                        f"-v{config['vocab_size']}.onnx")
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(export_text_model(path.stem, config=config)[0])
        return path.read_bytes()
    return onnx_of


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(ParallelEvalConfig, description=__doc__)
    start = time.time()
    rows = parallel.runs()
    found, summary = parallel.evaluate(rows, parallel.stacks(rows, exporter(Path(cfg.cache))))
    big = [parallel.megatron_175b()]
    paper = parallel.published(parallel.stacks(big, exporter(Path(cfg.cache))))
    ranks = {"layout model": parallel.ranking(found), "perfect scaling": parallel.ranking(found, "ideal_ms")}
    micro = {"layout model": parallel.micro_batch_ratios(found),
             "perfect scaling": parallel.micro_batch_ratios(found, "ideal_ms")}
    layers = parallel.layer_fits(found)
    text = parallel.markdown(found, summary, time.time() - start, paper, ranks, micro, layers)
    Path(f"{cfg.out}.md").write_text(text)
    Path(f"{cfg.out}.json").write_text(json.dumps(
        {"summary": {a: {g: asdict(e) for g, e in gs.items()} for a, gs in summary.items()}, "rows": found,
         "ranking": {a: asdict(r) for a, r in ranks.items()}, "micro_batch": micro, "layers": layers, "published": paper}, indent=1))
    print(text)
