"""Algorithms, one per page: config, pure loss, plan. Importing this package registers them."""

from jaxflow.algorithms.a2c import A2C, A2CConfig
from jaxflow.algorithms.a3c import A3C, A3CConfig
from jaxflow.algorithms.apex import APEX, APEXConfig
from jaxflow.algorithms.appo import APPO, APPOConfig
from jaxflow.algorithms.dqn import DQN, DQNConfig
from jaxflow.algorithms.impala import IMPALA, IMPALAConfig
from jaxflow.algorithms.maml import MAML, MAMLConfig
from jaxflow.algorithms.multiagent import MULTIAGENT
from jaxflow.algorithms.ppo import PPO, PPOConfig
from jaxflow.algorithms.sac import SAC, SACConfig
from jaxflow.algorithms.td3 import DDPG, TD3, DDPGConfig, TD3Config

__all__ = [
    "A2C",
    "A3C",
    "APEX",
    "APPO",
    "DDPG",
    "DQN",
    "IMPALA",
    "MAML",
    "MULTIAGENT",
    "PPO",
    "SAC",
    "TD3",
    "A2CConfig",
    "A3CConfig",
    "APEXConfig",
    "APPOConfig",
    "DDPGConfig",
    "DQNConfig",
    "IMPALAConfig",
    "MAMLConfig",
    "PPOConfig",
    "SACConfig",
    "TD3Config",
]
