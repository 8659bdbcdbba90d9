"""Device mode (Anakin): the on-device rollout's conventions, reuse of each algorithm's own
loss, members (seeds, sweeps), compilation count, and 4 forced CPU devices."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxflow.algorithms.ppo
from jaxflow import Algorithm, ConfigError, DeviceProgram, envs, get_algorithm
from jaxflow.algorithms import PPOConfig
from jaxflow.config import make_config
from jaxflow.networks.mlp import MLPActorCritic
from jaxflow.ondevice.rollout import EnvCarry, rollout
from jaxflow.policies import Categorical, Policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = "gymnax/CartPole-v1"
SINGLE = dict(env=CARTPOLE, num_envs=16, iterations_per_call=2)
"""The single-seed PPO run of :func:`single_run`; the seeds' and the 4 devices' runs take the same settings."""
SINGLE_RESULTS = 6
"""Results (compiled calls) :func:`single_run` trains: the seeds' curves are this long."""
DEVICE_RESULTS = 2
"""Results the 4-device run trains (4 iterations) before its parameters are compared."""
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


@dataclasses.dataclass
class SingleRun:
    """What :func:`single_run` trained and saw while it trained."""

    algo: Algorithm
    results: list[dict[str, Any]]
    weights_after_device_results: list[np.ndarray]
    compiles: list[int]  # backend compilations counted after the build and each result
    traces: list[int]  # functions traced, likewise


@pytest.fixture(scope="module")
def single_run() -> Iterator[SingleRun]:
    """One single-seed PPO run (:data:`SINGLE`) trained for :data:`SINGLE_RESULTS` results, the
    compilations and traces counted from before its build. Shared by
    test_device_mode_trains_with_the_algorithms_own_loss (its mode and loss),
    test_no_recompilation_after_the_first_iteration (the counts), both cases of
    test_seeds_are_members_and_seed_0_follows_the_single_seed_run (seed 0's reference curve and
    parameters) and test_four_devices_match_one_device (its parameters after 2 results): each of
    them built and trained this same run before."""
    events = {COMPILE_EVENT: 0, TRACE_EVENT: 0}

    def listen(event: str, _duration: float, **_meta: Any) -> None:
        if event in events:
            events[event] += 1

    compiles, traces, results = [], [], []
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        algo = Algorithm.build("PPO", **SINGLE)
        for _ in range(SINGLE_RESULTS):
            results.append(algo.train())
            compiles.append(events[COMPILE_EVENT])
            traces.append(events[TRACE_EVENT])
            if len(results) == DEVICE_RESULTS:
                weights = [np.asarray(w) for w in jax.tree.leaves(algo.program.get_weights())]
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    yield SingleRun(algo, results, weights, compiles, traces)
    algo.stop()


def _constant_value_params(net: MLPActorCritic, value: float):
    """Parameters whose value head outputs ``value`` for every observation."""
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))

    def fix(path, x):
        names = [getattr(p, "key", "") for p in path]
        head = x.shape[-1:] == (1,) if names[-1] == "kernel" else x.shape == (1,)
        return (jnp.zeros_like(x) if names[-1] == "kernel" else jnp.full_like(x, value)) if head else x

    return jax.tree_util.tree_map_with_path(fix, params)


@pytest.mark.parametrize("T", [12, 5, 4], ids=["several truncations per fragment", "one", "none"])
def test_rollout_bootstraps_time_limits_and_records_episodes(T):
    """CartPole with a 5-step time limit and a value net that says 2.0 everywhere: every 5th
    reward is 1 + 0.99 * 2.0 with discount 0, every other step 1 with discount 0.99, and each
    ended episode has length 5 and return 5 (the bootstrap is not part of the score). Fragments
    up to the time limit long bootstrap after the scan, longer ones at every step."""
    env, env_params = envs.make(CARTPOLE, max_steps_in_episode=5)
    net = MLPActorCritic(2)
    params = _constant_value_params(net, 2.0)
    B = 4
    obs, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(1), B), env_params)
    carry = EnvCarry(state, obs, jnp.zeros(B), jnp.zeros(B, jnp.int32))
    config = PPOConfig(env=CARTPOLE)
    run = jax.jit(
        lambda c, k: rollout(
            env, env_params, Policy(net, Categorical(2), (4,)), None, config, params, c, k, jnp.float32(0), T
        )
    )
    carry, traj, (returns, lengths, nonfinite) = run(carry, jax.random.PRNGKey(2))
    assert not np.asarray(nonfinite).any()  # every value of this env is finite
    truncated = (np.arange(T) % 5 == 4)[:, None].repeat(B, axis=1)
    np.testing.assert_allclose(np.asarray(traj["rewards"]), np.where(truncated, 1 + 0.99 * 2.0, 1.0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(traj["discounts"]), np.where(truncated, 0.0, 0.99), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(lengths), np.where(truncated, 5, 0))
    np.testing.assert_allclose(np.asarray(returns)[truncated], 5.0)
    assert np.isnan(np.asarray(returns)[~truncated]).all()
    np.testing.assert_allclose(np.asarray(traj["bootstrap_value"]), 2.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(traj["last_obs"]), np.asarray(carry.obs))
    np.testing.assert_array_equal(np.asarray(carry.episode_length), [T % 5] * B)
    assert traj["obs"].shape == (T, B, 4) and traj["dist_inputs"].shape == (T, B, 2)


def test_device_mode_trains_with_the_algorithms_own_loss(single_run):
    """The device program runs the very loss Ray mode's learner gets: the registered spec's
    function, traced with the run's config (not a copy of it). The program has single_run's
    settings, so it compiles to single_run's program (a hit in the persistent cache)."""
    spec = get_algorithm("PPO")
    assert spec.loss is jaxflow.algorithms.ppo.loss
    calls = []

    def recording_loss(params, batch, rng, *, policy, config):
        calls.append(config)
        return jaxflow.algorithms.ppo.loss(params, batch, rng, policy=policy, config=config)

    config = make_config(PPOConfig, **SINGLE)
    program = DeviceProgram(config, dataclasses.replace(spec, loss=recording_loss))
    out = program.call()
    assert calls and all(c.clip_eps == config.clip_eps for c in calls)
    assert np.isfinite(out["loss"]).all()
    algo = single_run.algo  # built by Algorithm.build, as a user builds it
    assert algo.mode == "device" and algo.program.loss is jaxflow.algorithms.ppo.loss


def test_no_recompilation_after_the_first_iteration(single_run):
    """Nothing compiled nor traced after single_run's first result. (Something was traced up to
    then: counted by traces, since single_run's programs may all be hits in the session's
    persistent cache, where nothing reaches the backend compiler.)"""
    compiles, traces = single_run.compiles, single_run.traces
    assert traces[0] > 0 and compiles[0] == compiles[-1]
    assert traces[0] == traces[-1]


def _curve(algo: Algorithm, n: int) -> list:
    return [algo.train() for _ in range(n)]


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_seeds_are_members_and_seed_0_follows_the_single_seed_run(single_run, batching):
    """4 seeds in one call: 4 different curves; seed 0's is the single-seed run's (single_run's,
    the same for both cases). Run one after
    another (lax.map, CPU's default) each member's arithmetic is its single run's: parameters
    equal bit for bit. vmap-ed, batched kernels may round the last bit differently, so there the
    curves are compared over 6 iterations and the parameters to 1e-4."""
    single = single_run.algo
    multi = Algorithm.build("PPO", num_seeds=4, member_batching=batching, **SINGLE)
    curve_1 = [r["episode_return_mean"] for r in single_run.results]
    results = _curve(multi, SINGLE_RESULTS)
    curves = {name: [r["members"][name]["episode_return_mean"] for r in results] for name in results[0]["members"]}
    assert list(curves) == ["seed=0", "seed=1", "seed=2", "seed=3"]
    assert len({tuple(c) for c in curves.values()}) == 4
    np.testing.assert_array_equal(curves["seed=0"], curve_1)
    for a, b in zip(jax.tree.leaves(single.program.get_weights()), jax.tree.leaves(multi.program.get_weights(0))):
        if batching == "map":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, atol=1e-4)
    assert results[-1]["episode_return_mean"] == pytest.approx(np.mean([c[-1] for c in curves.values()]))


def test_sweep_gives_each_member_its_own_value():
    algo = Algorithm.build("PPO", env=CARTPOLE, num_envs=8, iterations_per_call=1, sweep={"lr": [1e-4, 1e-2]})
    algo.train()
    lrs = jax.device_get(algo.program.state.train.opt_state.hyperparams["lr"])
    np.testing.assert_allclose(lrs, [1e-4, 1e-2], rtol=1e-6)
    assert list(algo.last_result["members"]) == ["seed=0,lr=0.0001", "seed=0,lr=0.01"]
    gamma = Algorithm.build("PPO", env=CARTPOLE, num_envs=8, iterations_per_call=1, sweep={"gamma": [0.9, 0.99]})
    np.testing.assert_allclose(jax.device_get(gamma.program.state.hyper["gamma"]), [0.9, 0.99], rtol=1e-6)


def test_device_mode_errors_name_the_field():
    with pytest.raises(ConfigError, match="vf_clip.*cannot vary"):
        Algorithm.build("PPO", env=CARTPOLE, vf_clip=0.2, sweep={"vf_clip": [0.1, 0.2]})
    with pytest.raises(ConfigError, match="mode='device'.*not a JAX environment.*Allowed"):
        Algorithm.build("PPO", env="CartPole-v1", mode="device")
    with pytest.raises(ConfigError, match="minibatch_size 256 is larger than the batch.*num_envs \\(4\\)"):
        Algorithm.build("PPO", env=CARTPOLE, num_envs=4)
    with pytest.raises(ConfigError, match="A3C has no device mode"):
        Algorithm.build("A3C", env=CARTPOLE, mode="device")
    with pytest.raises(ConfigError, match="num_seeds > 1, .* need device mode"):
        Algorithm.build("PPO", env=CARTPOLE, mode="ray", num_seeds=2)


DEVICE_RUN = r"""
import json, sys
import jax, numpy as np
from jaxflow import Algorithm
algo = Algorithm.build("PPO", **json.loads(sys.argv[2]))
assert algo.program.state.envs.obs.sharding.num_devices == len(jax.devices())
for _ in range(int(sys.argv[3])):
    r = algo.train()
np.savez(sys.argv[1], *jax.tree.leaves(algo.program.get_weights()))
print(json.dumps({"devices": len(jax.devices()), "return": r["episode_return_mean"]}))
"""


def _start_device_run(n: int, path: str) -> subprocess.Popen:
    """:data:`DEVICE_RUN` of :data:`SINGLE` in a new process on ``n`` forced CPU devices, its parameters saved to ``path``."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
    return subprocess.Popen(
        [sys.executable, "-c", DEVICE_RUN, path, json.dumps(SINGLE), str(DEVICE_RESULTS)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _device_weights(proc: subprocess.Popen, n: int, path: str) -> list[np.ndarray]:
    """The parameters the run ``proc`` on ``n`` devices saved to ``path``, once it ended well."""
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    info = json.loads(stdout.strip().splitlines()[-1])
    assert info["devices"] == n
    saved = np.load(path)
    return [saved[f"arr_{i}"] for i in range(len(saved.files))]  # np.savez's names, in the leaves' order


def test_four_devices_match_one_device(tmp_path, single_run):
    """Environments sharded over 4 forced CPU devices, parameters replicated: after 4
    iterations (64 minibatch steps) the parameters equal the 1-device run's to 1e-5. The
    1-device run is single_run's where this process runs on one CPU device (as the test's
    processes do), else a process of its own, as the 4-device one is."""
    paths = {n: str(tmp_path / f"{n}.npz") for n in (1, 4)}
    one_cpu = jax.default_backend() == "cpu" and jax.device_count() == 1
    # Both at once where both are needed: each spends seconds importing on one core before it computes.
    procs = {n: _start_device_run(n, paths[n]) for n in ((4,) if one_cpu else (1, 4))}
    outs = {n: _device_weights(proc, n, paths[n]) for n, proc in procs.items()}
    if one_cpu:
        outs[1] = single_run.weights_after_device_results
    assert len(outs[4]) == len(outs[1])
    for a, b in zip(outs[4], outs[1]):
        np.testing.assert_allclose(a, b, atol=1e-5)
