"""Weights & Biases (offline) and MLflow (a local file store) receive the config and every
result key of every iteration, read back from what each wrote."""

from __future__ import annotations

import glob
import json
import struct

import pytest

from jaxflow import Algorithm
from jaxflow.api.loggers import MLflowWriter, WandbWriter, parse_loggers
from jaxflow.api.writers import _scalars
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import to_json_dict

ITERATIONS = 3


@pytest.fixture(scope="module")
def run(ray_local):
    """Three real PPO results (sampled in the driver) and the run's config as the loop saves it."""
    algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=0, train_batch_size=256, minibatch_size=64, seed=1)
    try:
        results = [algo.train() for _ in range(ITERATIONS)]
    finally:
        algo.stop()
    return {"algorithm": "PPO", "config": to_json_dict(algo.config)}, results


def expected_rows(results):
    return [{k: v for k, v in _scalars(r).items() if v == v} for r in results]  # NaN left out


def wandb_records(path):
    """The protobuf records of a W&B run file: LevelDB's log format (32 KiB blocks of
    ``crc32c | length | type | data`` chunks) after W&B's 7-byte header."""
    from wandb.proto import wandb_internal_pb2

    data, block, records, pending = open(path, "rb").read(), 32768, [], b""
    pos = 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, or the LAST piece of a record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_offline_run_holds_the_config_and_every_result(run, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    config, results = run
    writer = WandbWriter(str(tmp_path / "ppo"), config, mode="offline")
    for r in results:
        writer.write(r)
    writer.close()
    (path,) = glob.glob(str(tmp_path / "ppo" / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = wandb_records(path)
    history = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history.append({k: v for k, v in items.items() if not k.startswith("_")})  # W&B's own _step, _runtime
    assert history == expected_rows(results)
    logged = {}
    for r in records:  # the config comes with the run record, and any later updates as config records
        kind = r.WhichOneof("record_type")
        if kind in ("run", "config"):
            updates = r.run.config.update if kind == "run" else r.config.update
            logged.update({i.key: json.loads(i.value_json) for i in updates})
    assert logged["algorithm"] == "PPO" and logged["config"] == config["config"]


def test_mlflow_file_store_run_holds_the_config_and_every_result(run, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config, results = run
    writer = MLflowWriter(str(tmp_path / "ppo"), config)
    for r in results:
        writer.write(r)
    writer.close()
    client = mlflow.tracking.MlflowClient("file://" + str(tmp_path / "ppo" / "mlruns"))
    data = client.get_run(writer.run_id).data
    assert (
        data.params["algorithm"] == "PPO"
        and float(data.params["config.optimizer.lr"]) == config["config"]["optimizer"]["lr"]
    )
    steps = [int(r["env_steps_sampled"]) for r in results]
    for key in expected_rows(results)[0]:
        history = sorted(client.get_metric_history(writer.run_id, key), key=lambda m: m.step)
        assert [m.step for m in history] == steps, key
        assert [m.value for m in history] == pytest.approx([row[key] for row in expected_rows(results)]), key


def test_logger_names_are_checked():
    assert parse_loggers("tensorboard, wandb") == ("tensorboard", "wandb")
    with pytest.raises(ConfigError, match=r"--logger takes a comma-separated list out of \['tensorboard'"):
        parse_loggers("tensorbord")
