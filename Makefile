# `make train` and `make test` do all set-up on first use (a .venv with the project installed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: train test bench clean

$(BIN)/jaxflow: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"
	touch $@

train: $(BIN)/jaxflow
	$(BIN)/jaxflow train --algo PPO --env CartPole-v1 --num-workers 2 --seed 0 \
	    --stop episode_return_mean=450 --stop env_steps_sampled=300000 --logdir runs/ppo-cartpole

test: $(BIN)/jaxflow
	$(BIN)/python -m pytest -q tests

bench: $(BIN)/jaxflow
	$(BIN)/python benchmarks/ppo_cartpole.py
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/dqn_cartpole.py
	$(BIN)/python benchmarks/device_mode.py

clean:
	rm -rf $(VENV) runs
