"""Algorithms, one per page: config, pure loss, plan. Importing this package registers them."""

from algorithms.a2c import A2C, A2CConfig
from algorithms.a3c import A3C, A3CConfig
from algorithms.apex import APEX, ApexConfig
from algorithms.appo import APPO, APPOConfig
from algorithms.dqn import DQN, DQNConfig
from algorithms.impala import IMPALA, IMPALAConfig
from algorithms.maml import MAML, MAMLConfig
from algorithms.multiagent import MULTIAGENT
from algorithms.ppo import PPO, PPOConfig

__all__ = ["A2C", "A2CConfig", "A3C", "A3CConfig", "APEX", "ApexConfig", "APPO", "APPOConfig", "DQN", "DQNConfig", "IMPALA", "IMPALAConfig", "MAML", "MAMLConfig", "MULTIAGENT", "PPO", "PPOConfig"]
