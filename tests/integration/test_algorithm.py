"""The Algorithm object: learner warm-up and result bookkeeping with real Ray workers."""

from __future__ import annotations

import pytest

from jaxflow import Algorithm, ConfigError


# PPO's defaults are PPO's tuned CartPole example, whose learning run (tests/integration/
# test_multinode.py) makes these checks of its first iterations: no second run of PPO here.
@pytest.mark.parametrize("name, fields", [("A2C", {"train_batch_size": 200})])
def test_warm_up_compiles_the_update_training_uses(ray_local, name, fields):
    algo = Algorithm.build(name, num_workers=2, **fields)
    try:
        assert algo.learner._update._cache_size() == 1  # compiled while the workers started
        results = [algo.train() for _ in range(3)]
        assert algo.learner._update._cache_size() == 1  # ... for exactly the batches training sees
    finally:
        algo.stop()
    per_iter = results[-1]["env_steps_trained"] - results[-2]["env_steps_trained"]
    # A2C's 200 rounds up to whole rounds of 2 workers x 8 envs x 16 steps = 256.
    assert per_iter == {"A2C": 256}[name]
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert results[-1]["num_updates"] == 3 and results[-1]["num_weight_syncs"] == 3
    sampler = results[-1]["sampler"]
    assert 0 < sampler["env_s"] + sampler["policy_s"] <= sampler["sample_s"]


def test_jax_actors_run_jax_on_the_cpu_whatever_the_job_asks(ray_local):
    # On a GPU machine every actor died importing envs (gymnax builds arrays at import) while
    # JAX's CUDA plugin looked for a GPU it could not have. An actor told to use a platform
    # this machine lacks stands in for that here.
    import ray

    from jaxflow import jax_actor

    class Probe:  # defined here so that Ray ships it by value
        def platform(self) -> tuple[str, str]:
            import os

            import jax

            return os.environ.get("JAX_PLATFORMS", ""), jax.default_backend()

    doomed = ray.remote(Probe).options(num_cpus=0, runtime_env={"env_vars": {"JAX_PLATFORMS": "tpu"}}).remote()
    with pytest.raises(ray.exceptions.RayTaskError, match="tpu"):
        ray.get(doomed.platform.remote(), timeout=120)
    probe = jax_actor(Probe, num_cpus=0).remote()
    assert ray.get(probe.platform.remote(), timeout=120) == ("cpu", "cpu")
    ray.kill(doomed)
    ray.kill(probe)


def test_workers_wanting_more_gpus_than_the_cluster_has_fail_before_any_starts(ray_local):
    import ray

    have = ray.cluster_resources().get("GPU", 0)
    cpus = ray.available_resources().get("CPU", 0)
    want = float(have + 1)
    with pytest.raises(
        ConfigError,
        match=rf"num_workers=2 x num_gpus_per_worker={want} needs {2 * want:g} GPUs but the Ray cluster has {have:g}",
    ):
        Algorithm.build("IMPALA", num_workers=2, num_gpus_per_worker=want)
    assert ray.available_resources().get("CPU", 0) == cpus  # no worker holds a CPU


def test_gpu_workers_act_on_the_gpu(ray_local):
    import ray

    if ray.cluster_resources().get("GPU", 0) < 0.5:
        pytest.skip("the Ray cluster has no GPU (run on a GPU machine: acting on a share of it)")
    from jaxflow import jax_actor

    class Probe:
        def platform(self) -> tuple[str, str, list]:
            import os

            import jax

            return os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", ""), jax.default_backend(), ray.get_gpu_ids()

    probe = jax_actor(Probe, num_gpus=0.25, num_cpus=0).remote()
    preallocate, backend, gpu_ids = ray.get(probe.platform.remote(), timeout=120)
    assert (preallocate, backend, len(gpu_ids)) == ("false", "gpu", 1)
    ray.kill(probe)
    algo = Algorithm.build("IMPALA", num_workers=2, num_gpus_per_worker=0.25)
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    assert results[-1]["env_steps_sampled"] > results[0]["env_steps_sampled"] > 0
