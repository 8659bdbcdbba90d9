"""The Algorithm object: learner warm-up and result bookkeeping with real Ray workers."""

from __future__ import annotations

import pytest

from jaxflow import Algorithm


@pytest.mark.parametrize("name, fields", [("PPO", {}), ("A2C", {"train_batch_size": 200})])
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
    assert per_iter == {"PPO": 1024, "A2C": 256}[name]
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert results[-1]["num_updates"] == 3 and results[-1]["num_weight_syncs"] == 3


def test_cpu_actors_run_jax_on_the_cpu_whatever_the_job_asks(ray_local):
    # On a GPU machine every actor died importing envs (gymnax builds arrays at import) while
    # JAX's CUDA plugin looked for a GPU it could not have. An actor told to use a platform
    # this machine lacks stands in for that here.
    import ray

    from jaxflow import cpu_actor

    class Probe:  # defined here so that Ray ships it by value
        def platform(self) -> tuple[str, str]:
            import os

            import jax

            import envs  # noqa: F401  (the import that failed)

            return os.environ.get("JAX_PLATFORMS", ""), jax.default_backend()

    doomed = ray.remote(Probe).options(num_cpus=0, runtime_env={"env_vars": {"JAX_PLATFORMS": "tpu"}}).remote()
    with pytest.raises(ray.exceptions.RayTaskError, match="tpu"):
        ray.get(doomed.platform.remote(), timeout=120)
    probe = cpu_actor(Probe, num_cpus=0).remote()
    assert ray.get(probe.platform.remote(), timeout=120) == ("cpu", "cpu")
    ray.kill(doomed)
    ray.kill(probe)
