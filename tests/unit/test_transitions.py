"""jaxflow.replay.transitions: fragments packed as deduplicated ring rows decode bit for bit, through
a real PrioritizedReplayBuffer, real gymnasium frame stacks, ring wrap-around and overwrites."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from jaxflow.replay.buffer import PrioritizedReplayBuffer, ReplayRows
from jaxflow.replay.stacks import encode_stacks
from jaxflow.replay.transitions import decode_rows, encode_fragment, rows_to_invalidate
from jaxflow.rollout.batch import SampleBatch, concat_batches

ATARI_FRAME_BYTES = 84 * 84


class NoiseImages(gymnasium.Env):
    """Uniformly random 6x6 uint8 frames (no two alike in practice); episodes last ``length`` steps."""

    observation_space = gymnasium.spaces.Box(0, 255, (6, 6), np.uint8)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(self, length: int = 1000):
        self.length = length
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._frame(), {}

    def step(self, action):
        self._t += 1
        return self._frame(), 0.0, self._t >= self.length, False, {}

    def _frame(self):
        return self.np_random.integers(0, 256, (6, 6), dtype=np.uint8)


class Collector:
    """Steps ``envs`` with random actions and cuts time-major fragments, as a rollout worker
    would: each fragment's tail observation is the next fragment's first."""

    def __init__(self, envs, seed=0):
        self.envs = envs
        self.rng = np.random.default_rng(seed)
        self.obs = np.stack([env.reset(seed=seed + b)[0] for b, env in enumerate(envs)])

    def warm_up(self, steps):
        for _ in range(steps):
            self.obs = np.stack([self._step(b, env, env.action_space.sample()) for b, env in enumerate(self.envs)])

    def fragment(self, num_steps, resets=()):
        """``(obs [T+1, B, ...], actions [T, B])``; ``(t, b)`` in ``resets`` makes ``obs[t, b]``
        a fresh reset instead of a step (a forced episode end inside the fragment)."""
        n = self.envs[0].action_space.n
        actions = self.rng.integers(0, n, (num_steps, len(self.envs)))
        obs = [self.obs]
        for t in range(1, num_steps + 1):
            obs.append(
                np.stack(
                    [
                        env.reset()[0] if (t, b) in resets else self._step(b, env, actions[t - 1, b])
                        for b, env in enumerate(self.envs)
                    ]
                )
            )
        self.obs = obs[-1]
        return np.stack(obs), actions

    @staticmethod
    def _step(b, env, action):
        obs, _, terminated, truncated, _ = env.step(action)
        return env.reset()[0] if terminated or truncated else obs


def noise_envs(num_envs, frame_stack, length=1000):
    envs = [NoiseImages(length) for _ in range(num_envs)]
    if frame_stack > 1:
        envs = [gymnasium.wrappers.FrameStackObservation(env, frame_stack) for env in envs]
    return envs


class Reference:
    """Transitions by id. Each transition's reward is its id (exact in float32), so a
    decoded row names the transition it must equal."""

    def __init__(self):
        self.next_id = 1  # 0 is the reward of context rows.
        self.parts = []

    def inputs(self, obs, actions, rng, max_n=3):
        """encode_fragment's arguments for a fragment, with random n-step offsets up to ``max_n``."""
        num_steps, num_envs = actions.shape
        ids = self.next_id + np.arange(num_steps * num_envs).reshape(num_steps, num_envs)
        self.next_id += ids.size
        offsets = np.minimum(
            rng.integers(1, max_n + 1, (num_steps, num_envs)), num_steps - np.arange(num_steps)[:, None]
        )
        discounts = np.where(rng.random((num_steps, num_envs)) < 0.2, 0.0, 0.99**offsets).astype(np.float32)
        priorities = rng.uniform(0.1, 2.0, (num_steps, num_envs))
        t = np.arange(num_steps)[:, None] + np.zeros(num_envs, np.int64)
        b = np.zeros((num_steps, 1), np.int64) + np.arange(num_envs)
        self.parts.append(
            {
                "id": ids.ravel(),
                "obs": obs[t, b].reshape(ids.size, *obs.shape[2:]),
                "next_obs": obs[t + offsets, b].reshape(ids.size, *obs.shape[2:]),
                "actions": actions.ravel(),
                "discounts": discounts.ravel(),
            }
        )
        return {
            "obs": obs,
            "actions": actions,
            "rewards": ids.astype(np.float32),
            "discounts": discounts,
            "next_offsets": offsets,
            "priorities": priorities,
        }

    def lookup(self, ids):
        table = {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]}
        order = np.argsort(table["id"])
        pos = order[np.searchsorted(table["id"], ids, sorter=order)]
        np.testing.assert_array_equal(table["id"][pos], ids)
        return {k: v[pos] for k, v in table.items()}


def assert_decodes_exactly(decoded, expected):
    for key in ("obs", "next_obs"):
        assert decoded[key].dtype == expected[key].dtype
        np.testing.assert_array_equal(decoded[key], expected[key])
    np.testing.assert_array_equal(decoded["actions"], expected["actions"])
    np.testing.assert_array_equal(decoded["discounts"], expected["discounts"])


def transition_slots(buffer):
    return np.flatnonzero(buffer.tree.leaves > 0)


def test_single_frame_round_trip_through_buffer():
    rng = np.random.default_rng(0)
    num_steps, num_envs = 9, 3
    obs = rng.standard_normal((num_steps + 1, num_envs, 4)).astype(np.float32)
    actions = rng.integers(0, 5, (num_steps, num_envs))
    reference = Reference()
    rows, priorities = encode_fragment(**reference.inputs(obs, actions, rng), frame_stack=1)

    assert len(priorities) == num_envs * (num_steps + 1) == 30
    assert np.count_nonzero(priorities > 0) == num_steps * num_envs == 27
    assert rows["frame"].dtype == np.float32 and rows["frame"].shape == (30, 4)
    assert rows["next"].dtype == np.int16 and "stack" not in rows
    # Env b's block is rows b*(T+1) .. b*(T+1)+T, obs[t] on row t of it, its tail a context row.
    np.testing.assert_array_equal(rows["frame"].reshape(num_envs, num_steps + 1, 4), obs.transpose(1, 0, 2))
    np.testing.assert_array_equal(priorities.reshape(num_envs, num_steps + 1)[:, -1], 0.0)

    buffer = PrioritizedReplayBuffer(capacity=40)
    buffer.add(rows, priorities)
    slots = transition_slots(buffer)
    assert len(slots) == 27
    decoded = decode_rows(buffer._storage, slots, frame_stack=1)
    expected = reference.lookup(decoded["rewards"].astype(np.int64))
    assert_decodes_exactly(decoded, expected)
    assert sorted(decoded["rewards"].astype(np.int64)) == list(range(1, 28))


def test_fragments_joined_by_concat_batches_decode_like_each_alone():
    """Workers' packed fragments can be joined (ConcatBatches in a bulk_sync plan): each
    block's pointers stay inside it, so the joined rows decode to both fragments."""
    rng = np.random.default_rng(1)
    reference = Reference()
    parts = []
    for _ in range(2):
        obs = rng.standard_normal((6, 2, 3)).astype(np.float32)
        rows, priorities = encode_fragment(**reference.inputs(obs, rng.integers(0, 4, (5, 2)), rng), frame_stack=1)
        parts.append(SampleBatch(ReplayRows(rows, priorities, 1), 10, np.zeros(0), np.zeros(0), 0))
    joined = concat_batches(parts).data
    assert isinstance(joined, ReplayRows) and joined.num_transitions == 20 and len(joined.priorities) == 24
    buffer = PrioritizedReplayBuffer(capacity=30)
    buffer.add(joined.rows, joined.priorities)
    decoded = decode_rows(buffer.storage, transition_slots(buffer), frame_stack=1)
    assert_decodes_exactly(decoded, reference.lookup(decoded["rewards"].astype(np.int64)))
    assert sorted(decoded["rewards"].astype(np.int64)) == list(range(1, 21))


def test_noise_frame_stack_round_trip_with_reset_costs_one_row_per_step():
    rng = np.random.default_rng(1)
    num_steps, num_envs = 20, 3
    collector = Collector(noise_envs(num_envs, 4), seed=3)
    obs, actions = collector.fragment(num_steps, resets={(7, 1), (12, 2)})
    assert obs.shape == (21, 3, 4, 6, 6) and obs.dtype == np.uint8
    reference = Reference()
    rows, priorities = encode_fragment(**reference.inputs(obs, actions, rng), frame_stack=4)

    # Every env starts at a reset stack [f, f, f, f] (1 row); each later obs is a shift or a
    # reset stack again (1 row each): T + 1 rows per env.
    assert len(priorities) == num_envs * (num_steps + 1) == 63
    assert rows["frame"].shape == (63, 6, 6) and rows["stack"].shape == (63, 4)
    stacks = rows["stack"][priorities > 0]
    np.testing.assert_array_equal(stacks[:, -1], 0)
    assert stacks.max() == 3 and stacks.min() == 0

    buffer = PrioritizedReplayBuffer(capacity=64)
    buffer.add(rows, priorities)
    decoded = decode_rows(buffer._storage, transition_slots(buffer), frame_stack=4)
    assert len(decoded["obs"]) == 60
    assert_decodes_exactly(decoded, reference.lookup(decoded["rewards"].astype(np.int64)))


def atari_envs(num_envs):
    ale_py = pytest.importorskip("ale_py")
    pytest.importorskip("cv2")  # AtariPreprocessing resizes with OpenCV.
    gymnasium.register_envs(ale_py)
    envs = []
    for _ in range(num_envs):
        env = gymnasium.make("ALE/Pong-v5", frameskip=1)
        env = gymnasium.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
        envs.append(gymnasium.wrappers.FrameStackObservation(env, 4))
    return envs


@pytest.mark.parametrize("num_steps", [64, 128])
def test_atari_frame_stack_round_trip_and_bytes(num_steps):
    rng = np.random.default_rng(2)
    envs = atari_envs(2)
    collector = Collector(envs, seed=0)
    collector.warm_up(60)  # Start mid-episode, with four distinct frames in obs[0].
    obs, actions = collector.fragment(num_steps, resets={(num_steps // 2, 1)})
    assert obs.shape == (num_steps + 1, 2, 4, 84, 84) and obs.dtype == np.uint8
    reset = obs[num_steps // 2, 1]
    assert (reset == reset[0]).all(), "gymnasium pads a reset stack with its first frame"
    reference = Reference()
    rows, priorities = encode_fragment(**reference.inputs(obs, actions, rng), frame_stack=4)
    assert rows["frame"].dtype == np.uint8

    buffer = PrioritizedReplayBuffer(capacity=len(priorities))
    buffer.add(rows, priorities)
    decoded = decode_rows(buffer._storage, transition_slots(buffer), frame_stack=4)
    assert len(decoded["obs"]) == 2 * num_steps
    assert_decodes_exactly(decoded, reference.lookup(decoded["rewards"].astype(np.int64)))

    # Each env: obs[0]'s distinct frames (at most 4), then one row per step, the mid-fragment
    # reset [f, f, f, f] included. A row: 7056 frame + 2 next + 8 stack + 8 action + 4 + 4 bytes.
    num_rows = len(priorities)
    assert 2 * (num_steps + 1) <= num_rows <= 2 * (num_steps + 4)
    row_bytes = ATARI_FRAME_BYTES + 2 + 8 + 8 + 4 + 4
    per_transition = sum(v.nbytes for v in rows.values()) / np.count_nonzero(priorities)
    assert per_transition == pytest.approx(num_rows * row_bytes / (2 * num_steps))
    assert per_transition < 1.1 * ATARI_FRAME_BYTES
    print(f"T={num_steps}: {num_rows} rows, {per_transition:.1f} bytes per transition")


@pytest.mark.parametrize("frame_stack,capacity", [(1, 29), (4, 37), (4, 23)])
def test_ring_wrap_with_overwrites_decodes_every_live_slot(frame_stack, capacity):
    rng = np.random.default_rng(frame_stack + capacity)
    collector = Collector(noise_envs(2, frame_stack, length=9), seed=5)
    collector.warm_up(2)
    buffer = PrioritizedReplayBuffer(capacity=capacity)
    reference = Reference()
    slot_id = np.zeros(capacity, np.int64)  # The transition id each slot was written with (0: none).
    overwritten_rows = invalidated = 0
    for i in range(14):
        num_steps = int(rng.integers(2, 8))
        obs, actions = collector.fragment(num_steps, resets={(int(rng.integers(1, num_steps + 1)), i % 2)})
        rows, priorities = encode_fragment(**reference.inputs(obs, actions, rng), frame_stack=frame_stack)
        overwritten_rows += max(len(buffer) + len(priorities) - capacity, 0)
        slots = buffer.add(rows, priorities)
        stored = slice(len(priorities) - len(slots), None)  # All rows, unless more than capacity.
        slot_id[slots] = np.where(priorities[stored] > 0, rows["rewards"][stored].astype(np.int64), 0)
        stale = rows_to_invalidate(int(slots[0]), len(slots), capacity, frame_stack)
        stale = stale[stale < len(buffer)]
        invalidated += np.count_nonzero(slot_id[stale])
        buffer.update_priorities(stale, np.zeros(len(stale)))
        slot_id[stale] = 0

        live = transition_slots(buffer)
        np.testing.assert_array_equal(live, np.flatnonzero(slot_id))
        decoded = decode_rows(buffer._storage, live, frame_stack)
        np.testing.assert_array_equal(decoded["rewards"].astype(np.int64), slot_id[live])
        assert_decodes_exactly(decoded, reference.lookup(slot_id[live]))
    assert overwritten_rows > 3 * capacity  # The ring wrapped several times.
    assert invalidated == 0 if frame_stack == 1 else invalidated > 0
    assert len(transition_slots(buffer)) > capacity // 2


def test_without_invalidation_overwritten_frames_corrupt_stacks():
    """The control for the test above: skipping rows_to_invalidate leaves live rows whose
    stacks read frames of newer fragments."""
    rng = np.random.default_rng(7)
    capacity = 23
    collector = Collector(noise_envs(2, 4), seed=5)
    collector.warm_up(6)
    buffer = PrioritizedReplayBuffer(capacity=capacity)
    reference = Reference()
    corrupt = 0
    for _ in range(10):
        obs, actions = collector.fragment(int(rng.integers(2, 6)))
        buffer.add(*encode_fragment(**reference.inputs(obs, actions, rng), frame_stack=4))
        decoded = decode_rows(buffer._storage, transition_slots(buffer), 4)
        expected = reference.lookup(decoded["rewards"].astype(np.int64))
        corrupt += int(np.any(decoded["obs"] != expected["obs"], axis=(1, 2, 3)).sum())
    assert corrupt > 0


def test_block_longer_than_capacity_keeps_its_decodable_tail():
    rng = np.random.default_rng(8)
    capacity = 11
    collector = Collector(noise_envs(1, 4), seed=2)
    collector.warm_up(5)
    buffer = PrioritizedReplayBuffer(capacity=capacity)
    buffer.add(*encode_fragment(**Reference().inputs(*collector.fragment(3), rng), frame_stack=4))
    reference = Reference()
    reference.next_id = 1000
    rows, priorities = encode_fragment(**reference.inputs(*collector.fragment(15), rng, max_n=1), frame_stack=4)
    assert len(priorities) == 19 > capacity  # 4 distinct frames of obs[0], then 15 shifts.
    slots = buffer.add(rows, priorities)
    stale = rows_to_invalidate(int(slots[0]), len(slots), capacity, 4)
    # Of the block's last 11 rows, the first 3 stack frames that were dropped.
    np.testing.assert_array_equal(stale, slots[:3])
    buffer.update_priorities(stale, np.zeros(3))
    live = transition_slots(buffer)
    assert len(live) == 7  # Rows 11..17 of the block: 19 rows less the dropped 8, the 3 stale and the tail.
    decoded = decode_rows(buffer._storage, live, 4)
    assert_decodes_exactly(decoded, reference.lookup(decoded["rewards"].astype(np.int64)))


def frames(*values):
    return np.stack([np.full((2, 3), v, np.uint8) for v in values])


def encode_one_env(stacks):
    """Encodes observations ``[T+1, 4, 2, 3]`` of one env with trivial transitions."""
    obs = np.stack(stacks)[:, None]
    num_steps = len(stacks) - 1
    zeros = np.zeros((num_steps, 1))
    return encode_fragment(
        obs,
        zeros.astype(np.int32),
        zeros.astype(np.float32),
        zeros.astype(np.float32),
        np.ones((num_steps, 1), np.int64),
        np.ones((num_steps, 1)),
        frame_stack=4,
    )


def test_reset_stack_of_one_frame_costs_one_row_and_distinct_frames_four():
    f, g, a, b, c, d, e, h = range(1, 9)
    rows, priorities = encode_one_env(
        [frames(f, f, f, f), frames(f, f, f, g), frames(a, b, c, d), frames(b, c, d, e), frames(h, h, h, h)]
    )
    # 1 (reset) + 1 (shift) + 4 (distinct reset) + 1 (shift) + 1 (reset) rows.
    assert len(priorities) == 8
    np.testing.assert_array_equal(rows["frame"][:, 0, 0], [f, g, a, b, c, d, e, h])
    np.testing.assert_array_equal(priorities, [1, 1, 0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(
        rows["stack"][[0, 1, 5, 6, 7]], [[0, 0, 0, 0], [1, 1, 1, 0], [3, 2, 1, 0], [3, 2, 1, 0], [0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(rows["next"], [1, 4, 0, 0, 0, 1, 1, 0])


def test_repeated_frames_inside_a_reset_stack_share_rows():
    a, b, c = 1, 2, 3
    rows, priorities = encode_one_env([frames(a, a, b, c), frames(a, b, c, c)])
    assert len(priorities) == 4  # a, b, c, then the shift's newest frame (c again: shifts store it).
    np.testing.assert_array_equal(rows["stack"][2], [2, 2, 1, 0])
    decoded = decode_rows(rows, np.array([2]), 4)
    np.testing.assert_array_equal(decoded["obs"][0], frames(a, a, b, c))
    np.testing.assert_array_equal(decoded["next_obs"][0], frames(a, b, c, c))


@pytest.mark.parametrize(
    "start,count,capacity,frame_stack,expected",
    [
        (8, 5, 16, 4, [13, 14, 15]),
        (14, 5, 16, 4, [3, 4, 5]),
        (0, 14, 16, 4, [14, 15]),  # Slot 0 is the block's own first row.
        (3, 16, 16, 4, [3, 4, 5]),  # A full ring's worth: maybe truncated, so its first rows go.
        (3, 40, 16, 4, [11, 12, 13]),
        (5, 7, 16, 1, []),
        (5, 0, 16, 4, []),
    ],
)
def test_rows_to_invalidate(start, count, capacity, frame_stack, expected):
    got = rows_to_invalidate(start, count, capacity, frame_stack)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


def test_row_layout_bytes():
    obs = np.zeros((5, 2, 4), np.float32)
    zeros = np.zeros((4, 2))
    rows, priorities = encode_fragment(
        obs,
        zeros.astype(np.int64),
        zeros.astype(np.float32),
        zeros.astype(np.float32),
        np.ones((4, 2), np.int64),
        np.ones((4, 2)),
    )
    # 10 rows of 16 (frame) + 2 (next) + 8 (action) + 4 + 4 bytes, for 8 transitions.
    assert len(priorities) == 10 and np.count_nonzero(priorities) == 8
    assert {k: v[0].nbytes for k, v in rows.items()} == {
        "frame": 16,
        "next": 2,
        "actions": 8,
        "rewards": 4,
        "discounts": 4,
    }


def valid_fragment(num_steps=4, num_envs=2, frame_stack=4):
    zeros = np.zeros((num_steps, num_envs))
    return {
        "obs": np.zeros((num_steps + 1, num_envs, frame_stack, 3, 3), np.uint8),
        "actions": zeros.astype(np.int64),
        "rewards": zeros.astype(np.float32),
        "discounts": zeros.astype(np.float32),
        "next_offsets": np.ones((num_steps, num_envs), np.int64),
        "priorities": np.ones((num_steps, num_envs)),
        "frame_stack": frame_stack,
    }


@pytest.mark.parametrize(
    "change,message",
    [
        ({"actions": np.zeros((4, 3), np.int64)}, r"actions must have leading shape \[T, B\] = \(4, 2\)"),
        ({"rewards": np.zeros((5, 2), np.float32)}, r"rewards must have shape \[T, B\] = \(4, 2\)"),
        ({"discounts": np.zeros(8, np.float32)}, "discounts must have shape"),
        ({"next_offsets": np.full((4, 2), 2)}, r"next_offsets must be in 1\.\.T-t.*first at t=3, b=0: 2\)"),
        ({"next_offsets": np.zeros((4, 2), np.int64)}, "next_offsets must be in 1..T-t"),
        ({"next_offsets": np.ones((4, 2))}, "next_offsets must be integers"),
        ({"priorities": np.zeros((4, 2))}, r"priorities must be finite and > 0"),
        ({"frame_stack": 3}, "frame_stack=3 needs obs of shape"),
        ({"frame_stack": 0}, "frame_stack must be a positive integer"),
        ({"obs": np.zeros((1, 2, 4, 3, 3), np.uint8)}, r"obs must be \[T\+1, B, \*obs_shape\] with T >= 1"),
    ],
)
def test_encode_rejects_mismatched_arguments(change, message):
    with pytest.raises(ValueError, match=message):
        encode_fragment(**{**valid_fragment(), **change})


def test_decode_rejects_mismatched_frame_stack_and_slots():
    rows, _ = encode_fragment(**valid_fragment())
    with pytest.raises(ValueError, match=r"frame_stack=2 needs a 'stack' field of shape \[capacity, 2\]"):
        decode_rows(rows, np.array([0]), 2)
    with pytest.raises(ValueError, match="frame_stack=1 was given"):
        decode_rows(rows, np.array([0]), 1)
    assert len(rows["frame"]) == 10  # Zero frames: every obs a shift of the one before.
    with pytest.raises(ValueError, match=r"indices must be slots in \[0, 10\)"):
        decode_rows(rows, np.array([10]), 4)


# --- encode_stacks: on-policy fragments as single frames -----------------------------------


def rebuilt(frames, index):
    """Stacks ``[T+1, B, k, ...]`` from encode_stacks' output, in numpy (the learner's is JAX)."""
    b = np.arange(index.shape[1])[None, :, None]
    stacks = frames[np.maximum(index, 0), b]
    stacks[index < 0] = 0
    return stacks


def test_encode_stacks_hand_checked_shift_repeat_and_zero_padded_resets():
    a, b, c, d, e, f, g, h, p, q, r, s_, u = range(1, 14)
    env0 = [frames(a, b, c, d), frames(b, c, d, e), frames(f, f, f, f), frames(f, f, f, g), frames(f, f, g, h)]
    env1 = [frames(0, 0, 0, p), frames(0, 0, p, q), frames(0, 0, 0, r), frames(0, 0, r, s_), frames(0, r, s_, u)]
    stacks = np.stack([np.stack(env0), np.stack(env1)], axis=1)  # [T+1 = 5, B = 2, 4, 2, 3]
    got_frames, index = encode_stacks(stacks[:-1], stacks[-1])
    assert got_frames.shape == (4 + 4, 2, 2, 3) and got_frames.dtype == np.uint8 and index.dtype == np.int16
    np.testing.assert_array_equal(got_frames[:, 0, 0, 0], [a, b, c, d, e, f, g, h])
    np.testing.assert_array_equal(got_frames[:, 1, 0, 0], [0, 0, 0, p, q, r, s_, u])
    # env 0: a shift, gymnasium's reset [f, f, f, f] (its newest frame, position 5, four times), shifts.
    np.testing.assert_array_equal(index[:, 0], [[0, 1, 2, 3], [1, 2, 3, 4], [5, 5, 5, 5], [5, 5, 5, 6], [5, 5, 6, 7]])
    # env 1: ale-py's zero-padded reset at t=2; its first zero frame matches the one shifted in.
    np.testing.assert_array_equal(
        index[:, 1], [[0, 1, 2, 3], [1, 2, 3, 4], [2, -1, -1, 5], [-1, -1, 5, 6], [-1, 5, 6, 7]]
    )
    np.testing.assert_array_equal(rebuilt(got_frames, index), stacks)


def test_encode_stacks_refuses_stacks_it_cannot_rebuild_and_bad_shapes():
    a, b, c, d, x = 1, 2, 3, 4, 9
    stacks = np.stack([frames(a, b, c, d), frames(x, c, d, a)])[:, None]  # frame 0 of t=1 comes from nowhere
    with pytest.raises(ValueError, match=r"Frame 0 of observation 1 of environment 0 .*send_frames_once=False"):
        encode_stacks(stacks[:1], stacks[1])
    with pytest.raises(ValueError, match=r"obs \[T, B, k, \*frame_shape\] with k >= 2"):
        encode_stacks(np.zeros((3, 2, 1, 4, 4), np.uint8), np.zeros((2, 1, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="last_obs"):
        encode_stacks(np.zeros((3, 2, 4, 4, 4), np.uint8), np.zeros((1, 4, 4, 4), np.uint8))


@pytest.mark.parametrize("vector_env", ["python", "ale"])
def test_encode_stacks_round_trips_real_atari_fragments_with_resets(vector_env):
    from jaxflow import envs as jaxflow_envs

    num_envs, T = 3, 32
    # 60 agent steps per episode (240 frames), so a fragment crosses about one reset per env.
    config = {"max_num_frames_per_episode": 240}
    if vector_env == "ale":
        env = jaxflow_envs.ALEVectorEnv("ALE/Pong-v5", num_envs, 0, config, 0, 0, 1)
    else:
        env = jaxflow_envs.VectorEnv("ALE/Pong-v5", num_envs, 0, config, 0, 0)
    rng = np.random.default_rng(0)
    obs, resets, zero_frames = env.reset(), 0, 0
    for _ in range(4):
        fragment = np.empty((T,) + obs.shape, obs.dtype)
        for t in range(T):
            fragment[t] = obs
            step = env.step(rng.integers(0, 6, num_envs).astype(np.int32))
            obs, resets = step.obs, resets + int((step.terminated | step.truncated).sum())
        got_frames, index = encode_stacks(fragment, obs)
        np.testing.assert_array_equal(rebuilt(got_frames, index), np.concatenate([fragment, obs[None]]))
        assert got_frames.nbytes == (T + 4) * num_envs * ATARI_FRAME_BYTES  # vs (T + 1) * 4 frames as stacks
        zero_frames += int((index < 0).sum())
    assert resets >= num_envs
    # gymnasium repeats a reset's first frame; ale-py's vector env zero-pads, which the index marks -1.
    assert (zero_frames > 0) == (vector_env == "ale")
