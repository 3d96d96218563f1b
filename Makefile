# Two commands on a fresh machine:  make demo   (main job end to end)   make test   (tests)
# The committed results and shipped predictor, from scratch (each step resumes):
#   make results     corpus -> both encoders -> docs/results.{md,json}
#   make predictor   corpus -> both encoders -> trappm_ray/predictors/default (uses the v2 one)
.PHONY: setup demo test test-slow bench corpus encoders predictor results

PY = .venv/bin/python
PRETRAIN = $(PY) jobs/pretrain_gae.py --corpus artifacts/corpus --storage artifacts/pretrain \
	--dims 128,64,64,64 --num-workers 1 --cache true

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) jobs/demo.py

test:
	bash scripts/test.sh

test-slow:
	bash scripts/test.sh -m slow

bench: setup
	$(PY) benchmarks/featurize.py

corpus: setup
	$(PY) jobs/build_dataset.py --out artifacts/corpus --labels data/labels

encoders: corpus
	$(PRETRAIN) --name gae-v2-cpu --max-graphs 8000 --epochs 8
	$(PRETRAIN) --name gae-v1-cpu --feature-set trappm-v1 --max-graphs 4000 --epochs 5

predictor: encoders
	$(PY) jobs/train_regressors.py --ship true

results: encoders
	$(PY) jobs/evaluate.py --arch-seeds 2 --baseline-seeds 1 \
		--split-targets train_step_ms,train_memory_mb \
		--transfer-predictor trappm_ray/predictors/default \
		--transfer-to intel-r-xeon-r-processor-t2
