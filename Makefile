# Two commands on a fresh machine:  make demo   (main job end to end)   make test   (tests)
# The committed results and shipped predictor, from scratch (each step resumes):
#   make results     corpus -> both encoders -> docs/results.{md,json}
#   make predictor   corpus -> both encoders -> trappm_ray/predictors/default (uses the v2 one)
.PHONY: setup demo test test-slow bench corpus encoders predictor results

PY = .venv/bin/python
# Each --preset is defined once, in trappm_ray/presets.py.

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
	$(PY) jobs/build_dataset.py --preset labeled

encoders: corpus
	$(PY) jobs/pretrain_gae.py --preset gae-v2-cpu
	$(PY) jobs/pretrain_gae.py --preset gae-v1-cpu

predictor: encoders
	$(PY) jobs/train_regressors.py --preset ship

results: encoders
	$(PY) jobs/evaluate.py --preset results
