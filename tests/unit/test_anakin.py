"""Device mode (Anakin): the on-device rollout's conventions, reuse of each algorithm's own
loss, members (seeds, sweeps), compilation count, and 4 forced CPU devices."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

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


def test_device_mode_trains_with_the_algorithms_own_loss():
    """The device program runs the very loss Ray mode's learner gets: the registered spec's
    function, traced with the run's config (not a copy of it)."""
    spec = get_algorithm("PPO")
    assert spec.loss is jaxflow.algorithms.ppo.loss
    calls = []

    def recording_loss(params, batch, rng, *, policy, config):
        calls.append(config)
        return jaxflow.algorithms.ppo.loss(params, batch, rng, policy=policy, config=config)

    config = make_config(
        PPOConfig, env=CARTPOLE, num_envs=4, rollout_fragment_length=16, minibatch_size=32, iterations_per_call=1
    )
    program = DeviceProgram(config, dataclasses.replace(spec, loss=recording_loss))
    out = program.call()
    assert calls and all(c.clip_eps == config.clip_eps for c in calls)
    assert np.isfinite(out["loss"]).all()
    algo = Algorithm.build("PPO", env=CARTPOLE, num_envs=4, minibatch_size=32, iterations_per_call=1)
    assert algo.mode == "device" and algo.program.loss is jaxflow.algorithms.ppo.loss


def test_no_recompilation_after_the_first_iteration():
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kw: (
            compiles.append(event) if event == "/jax/core/compile/backend_compile_duration" else None
        )
    )
    algo = Algorithm.build("PPO", env=CARTPOLE, num_envs=8, iterations_per_call=2)
    algo.train()
    after_first = len(compiles)
    for _ in range(4):
        algo.train()
    assert after_first > 0 and len(compiles) == after_first


def _curve(algo: Algorithm, n: int) -> list:
    return [algo.train() for _ in range(n)]


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_seeds_are_members_and_seed_0_follows_the_single_seed_run(batching):
    """4 seeds in one call: 4 different curves; seed 0's is the single-seed run's. Run one after
    another (lax.map, CPU's default) each member's arithmetic is its single run's: parameters
    equal bit for bit. vmap-ed, batched kernels may round the last bit differently, so there the
    curves are compared over 6 iterations and the parameters to 1e-4."""
    kw = dict(env=CARTPOLE, num_envs=16, iterations_per_call=2)
    single = Algorithm.build("PPO", **kw)
    multi = Algorithm.build("PPO", num_seeds=4, member_batching=batching, **kw)
    curve_1 = [r["episode_return_mean"] for r in _curve(single, 6)]
    results = _curve(multi, 6)
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


FOUR_DEVICES = r"""
import json, sys
import jax, numpy as np
from jaxflow import Algorithm
algo = Algorithm.build("PPO", env="gymnax/CartPole-v1", num_envs=8, iterations_per_call=2, minibatch_size=64)
assert algo.program.state.envs.obs.sharding.num_devices == len(jax.devices())
for _ in range(2):
    r = algo.train()
np.savez(sys.argv[1], *jax.tree.leaves(algo.program.get_weights()))
print(json.dumps({"devices": len(jax.devices()), "return": r["episode_return_mean"]}))
"""


def test_four_devices_match_one_device(tmp_path):
    """Environments sharded over 4 forced CPU devices, parameters replicated: after 4
    iterations (32 minibatch steps) the parameters equal the 1-device run's to 1e-5."""
    procs = {}
    for n in (1, 4):  # both at once: each spends seconds importing on one core before it computes
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
        procs[n] = subprocess.Popen(
            [sys.executable, "-c", FOUR_DEVICES, str(tmp_path / f"{n}.npz")],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    outs = {}
    for n, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        info = json.loads(stdout.strip().splitlines()[-1])
        assert info["devices"] == n
        outs[n] = np.load(tmp_path / f"{n}.npz")
    for k in outs[1].files:
        np.testing.assert_allclose(outs[4][k], outs[1][k], atol=1e-5)
