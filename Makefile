# `make train` and `make test` do all set-up on first use (a .venv with the project installed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SOURCES := jaxflow algorithms envs tests benchmarks

.PHONY: train test check lint typecheck format bench notebooks clean

# constraints.txt pins every dependency to the versions CI tests (pip resolves the newest without it).
$(BIN)/jaxflow: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]" -c constraints.txt
	touch $@

# The demo run: each `make train` replaces the last one in runs/ppo-cartpole (--overwrite; a
# logdir that holds a run is otherwise refused).
train: $(BIN)/jaxflow
	$(BIN)/jaxflow train --algo PPO --env CartPole-v1 --num-workers 2 --seed 0 \
	    --stop episode_return_mean=450 --stop env_steps_sampled=300000 --logdir runs/ppo-cartpole --overwrite

# The whole suite: unit, integration and learning tests, and the docstrings' examples.
test: $(BIN)/jaxflow
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=40 --doctest-modules jaxflow tests

# Lint, format and type checks (CI runs them before the tests).
check: lint typecheck

lint: $(BIN)/jaxflow
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

typecheck: $(BIN)/jaxflow
	$(BIN)/mypy

format: $(BIN)/jaxflow
	$(BIN)/ruff check --fix $(SOURCES)
	$(BIN)/ruff format $(SOURCES)

bench: $(BIN)/jaxflow
	$(BIN)/python benchmarks/ppo_cartpole.py
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/dqn_cartpole.py
	$(BIN)/python benchmarks/device_mode.py

# The notebooks stored with their outputs, executed again (about 3 minutes on 2 cores); tests/integration/test_notebooks.py
# fails on a notebook whose cells changed since.
notebooks: $(BIN)/jaxflow
	$(BIN)/python benchmarks/notebook_outputs.py

clean:
	rm -rf $(VENV) runs
