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
