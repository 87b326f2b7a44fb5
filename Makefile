# Two entry points: `make bench` (the default study) and `make test` (the test suite but
# its integration tests, on two workers). Both create .venv when it is missing and install
# the project into it, at the versions of constraints.txt. `make test-integration` runs
# the tests left out (other processes: torchrun ranks, the CLI, concurrent writers;
# statistical sweeps). `make docs` builds the documentation site into site/.
PYTHON ?= python3
VENV ?= .venv
# The torch build to install when the venv has none. Override for another build, e.g.
# make bench TORCH_SPEC='torch>=2.5' (the default wheel on PyPI, with CUDA).
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# The processes `make test` and `make test-integration` spread the tests over
# (pytest-xdist); 0 runs them in this one.
TEST_WORKERS ?= 2

.PHONY: bench test test-integration test-slow fuzz lint docs setup clean calibration

$(BIN)/attnbench: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev,hf,docs]" -c constraints.txt
	touch $@

setup: $(BIN)/attnbench

bench: setup
	$(BIN)/attnbench run

test: setup
	$(BIN)/python -m pytest -m "not integration" -n $(TEST_WORKERS)

test-integration: setup
	$(BIN)/python -m pytest -m integration -n $(TEST_WORKERS)

# Also the slow tests: compiling flex_attention on the CPU, a minute or so.
test-slow: setup
	$(BIN)/python -m pytest --slow

# The long fuzzing profile (1,000 examples per property, about 4 minutes on 2 cores);
# `make test` runs a short one.
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest tests/fuzz -p no:cacheprovider --hypothesis-show-statistics

# The performance model on this machine (docs/commands/predict.md): two decode sweeps of
# configs/calibration.yaml, a calibration fitted on the first, checked against the second.
CALIBRATION = results/bench/calibration
calibration: setup
	$(BIN)/attnbench decode-speed --config configs/calibration.yaml --batch 1,8 --prompt-len 512,2048 --json $(CALIBRATION)-fit-cpu.json
	$(BIN)/attnbench decode-speed --config configs/calibration.yaml --batch 2,4 --prompt-len 1024,4096 --json $(CALIBRATION)-check-cpu.json
	$(BIN)/attnbench predict --calibrate $(CALIBRATION)-fit-cpu.json --to $(CALIBRATION)-cpu.json
	$(BIN)/attnbench predict --check $(CALIBRATION)-check-cpu.json --calibration $(CALIBRATION)-cpu.json --min-time 1ms

lint: setup
	$(BIN)/ruff check attnbench tests scripts
	$(BIN)/ruff format --check attnbench tests scripts

# The documentation site, into site/; a warning (a broken link, a page left out of the
# navigation, a docstring the API reference cannot read) fails the build. The variable
# silences the theme's notice about its own end of life, which is no warning of the site.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build site *.egg-info
