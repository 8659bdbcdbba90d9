"""``jaxflow evaluate``: the checkpoint it plays (each newer one it skipped said in a line),
the member of a run of several it plays, and the line it ends with."""

from __future__ import annotations

import argparse
import json
from typing import Any


def evaluate_command(args: argparse.Namespace) -> int:
    """``jaxflow evaluate``: plays the checkpoint's greedy policy (``--video``: recorded) and
    prints its mean return; its exit status."""
    from jaxflow.api.algorithm import Algorithm, load_policy
    from jaxflow.api.evaluation import EvaluationProgress
    from jaxflow.rollout.evaluation import evaluate_policy

    plan = _evaluated(args.checkpoint)
    ckpt = plan.path
    if plan.spec.run.program is not None:
        # A run with its own program (MAML, multi-agent) evaluates itself.
        algo = Algorithm.restore(ckpt)
        try:
            out = algo.evaluate(episodes=args.episodes, seed=args.seed, member=_own_member(ckpt, args.member))
        finally:
            algo.stop()
        print(f"{algo.config.env}: {json.dumps({k: v for k, v in out.items() if not isinstance(v, list)})}")
        return 0
    config, policy, params, normalizer = load_policy(ckpt, args.member, plan)
    progress = EvaluationProgress(args.episodes)  # a line every few seconds in a long evaluation
    if args.video:  # the videos go to a new folder, moved into place complete with their videos.json
        from jaxflow.api.outputs import VIDEOS, write_videos_description, written

        with written(args.video, VIDEOS, args.overwrite) as folder:
            out = evaluate_policy(
                config, policy, params, args.episodes, args.seed, normalizer, folder, progress=progress
            )
            write_videos_description(folder, out, config.env, ckpt)
    else:
        out = evaluate_policy(config, policy, params, args.episodes, args.seed, normalizer, progress=progress)
    print(
        f"{config.env}{_member_played(ckpt, args.member)}: greedy return over {out['episodes']} episodes: mean {out['return_mean']:.2f}, std {out['return_std']:.2f}"
        + (f"; videos in {args.video}" if args.video else "")
    )
    return 0


def _evaluated(path: str) -> Any:
    """The restore plan of the checkpoint ``evaluate`` plays, found once: ``path``, or the newest
    under it that verifies and fits its config; one line for each newer one skipped, one naming it."""
    from jaxflow.api.restore import plan_restore

    plan = plan_restore(path, warn=False)
    for _, why in plan.skipped:
        print(f"jaxflow: skipped {why}", flush=True)
    print(f"jaxflow: evaluating {plan.path}", flush=True)
    return plan


def _own_member(ckpt: str, member: int | str | None) -> int:
    """The agent a run with its own program (multi-agent) plays: an index; none is marked best."""
    if isinstance(member, str):
        from jaxflow.api.checkpoint import fail

        raise fail(ckpt, f"marks no {member} member (a device-mode PBT run's checkpoints do); give --member N")
    return member or 0


def _member_played(path: str, member: int | str | None) -> str:
    """``, member <i> (best)``: which member of a device-mode run was played, where one was named
    or the checkpoint marks a best one (after ``load_policy`` checked it); else ``""``."""
    from jaxflow.api.algorithm import BEST, find_checkpoint

    marked = find_checkpoint(path)[1].get("pbt", {}).get("best_member")
    if member is None and marked is None:
        return ""
    chosen = marked if member in (None, BEST) else member
    return f", member {chosen}" + (" (best)" if chosen == marked else "")
