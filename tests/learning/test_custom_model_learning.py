"""A model of the user's own trains PPO to CartPole's 450, and the run restores and
evaluates from its checkpoint with that model (in Python and with `jaxflow evaluate`)."""

from __future__ import annotations

import flax.linen as nn
import jax
import pytest

from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning


class GeluActorCritic(nn.Module):
    """Not jaxflow's network: GELU layers with layer norm, separate actor and critic torsos."""

    num_outputs: int
    width: int = 64

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        def torso(h: jax.Array) -> jax.Array:
            h = nn.gelu(nn.LayerNorm()(nn.Dense(self.width)(h)))
            return nn.gelu(nn.Dense(self.width)(h))

        logits = nn.Dense(self.num_outputs, kernel_init=nn.initializers.orthogonal(0.01))(torso(obs))
        return logits, nn.Dense(1)(torso(obs))[..., 0]


def test_a_custom_flax_module_trains_ppo_on_cartpole_to_450_and_restores(ray_local, tmp_path, capsys):
    algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=2, seed=0, model=GeluActorCritic(2))
    assert algo.config.model == f"{__name__}:GeluActorCritic"
    try:
        result = train(algo, {"episode_return_mean": 450.0, "env_steps_sampled": 200_000}, verbose=False)
        algo.save(str(tmp_path))
        before = algo.evaluate(episodes=3, seed=5)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= 450.0, result
    restored = Algorithm.restore(str(tmp_path), num_workers=0)
    try:
        assert isinstance(restored.policy.network, GeluActorCritic)
        assert restored.evaluate(episodes=3, seed=5)["returns"] == before["returns"]
    finally:
        restored.stop()
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path), "--episodes", "3", "--seed", "5"]) == 0
    assert f"mean {before['return_mean']:.2f}" in capsys.readouterr().out
