"""On-device training for JAX environments (Anakin): rollout and update compiled together."""

from jaxflow.ondevice.members import Member, members, with_hyper
from jaxflow.ondevice.pbt import PBTState, PopulationBasedTraining
from jaxflow.ondevice.program import DeviceProgram
from jaxflow.ondevice.rollout import EnvCarry, rollout, step_envs
from jaxflow.ondevice.source import OnDevice
from jaxflow.ondevice.spec import TRANSITIONS, DeviceReplay, DeviceSpec, ReplayBuffer, flat_batch, num_device_envs
from jaxflow.ondevice.state import AnakinState
from jaxflow.ondevice.update import replay_update

__all__ = [
    "TRANSITIONS",
    "AnakinState",
    "DeviceProgram",
    "DeviceReplay",
    "DeviceSpec",
    "EnvCarry",
    "Member",
    "OnDevice",
    "PBTState",
    "PopulationBasedTraining",
    "ReplayBuffer",
    "flat_batch",
    "members",
    "num_device_envs",
    "replay_update",
    "rollout",
    "step_envs",
    "with_hyper",
]
