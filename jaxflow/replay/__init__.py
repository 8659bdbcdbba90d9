"""Replay: a prioritized buffer on the host, replay rows, shards as Ray actors (or one in the
driver's process), a buffer on the device."""

from jaxflow.replay.buffer import PrioritizedReplayBuffer, ReplayRows
from jaxflow.replay.local import LocalReplay, replay_in_driver
from jaxflow.replay.on_device import DeviceReplayState
from jaxflow.replay.replayed import ReplayBatch, ReplaySource
from jaxflow.replay.shard import ReplayShard, ReplayShardError
from jaxflow.replay.shards import ReplayShards
from jaxflow.replay.stacks import encode_stacks
from jaxflow.replay.sum_tree import SumTree
from jaxflow.replay.transitions import decode_rows, encode_fragment, rows_to_invalidate

__all__ = [
    "DeviceReplayState",
    "LocalReplay",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayRows",
    "ReplayShard",
    "ReplayShardError",
    "ReplayShards",
    "ReplaySource",
    "SumTree",
    "decode_rows",
    "encode_fragment",
    "encode_stacks",
    "replay_in_driver",
    "rows_to_invalidate",
]
