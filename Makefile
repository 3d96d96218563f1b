# Two commands on a fresh machine:  make demo   (main job end to end)   make test   (tests)
.PHONY: setup demo test test-slow bench corpus

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/python jobs/demo.py

test:
	bash scripts/test.sh

test-slow:
	bash scripts/test.sh -m slow

bench: setup
	.venv/bin/python benchmarks/featurize.py

corpus: setup
	.venv/bin/python jobs/build_dataset.py --out artifacts/corpus
