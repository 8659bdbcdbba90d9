"""SAC and TD3 on Pendulum-v1 and HalfCheetah-v5 for a fixed env-step budget, against
Stable-Baselines-Jax (SBX) with the same hyperparameters, measured in the same run.

Runners: ``sbx`` (SBX in its own virtual environment, ``benchmarks/.venvs/sbx``, made on
first use: torch's local CPU build first, then ``sbx-rl``), ``driver`` (jaxflow, sampling
in the driver: ``num_workers=0``, one learner), ``workers`` (``--workers`` rollout workers)
``device`` (jaxflow's device mode on ``gymnax/Pendulum-v1``, one env; Pendulum only) and
``device-many`` (device mode with ``DEVICE_MANY`` envs and a lower replay ratio, for a longer
budget: env steps/s at the return SBX reaches). Each reports env steps/s, gradient steps/s and the training return at equal env steps, medians
over seeds, and ratios against SBX's medians.

Writes ``benchmarks/results/continuous.json``, ``.md`` and ``.png`` (learning curves) and
prints the Markdown report. Command lines: see ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import itertools
import json
import math
import os
import subprocess
import sys
import time
import traceback
from typing import Any

import numpy as np
from common import argument_parser, fmt, logger, machine_info, median_of_measured, ratio, save_figure, write_report

log = logger("continuous")

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
SBX_VENV = os.path.join(HERE, ".venvs", "sbx")
SBX_VERSION = "0.28.0"
TORCH_VERSION = "2.13.0"  # the local CPU build; any other torch pip finds comes with CUDA packages

CURVE_STEP = 1_000
"""Env steps between two points of a learning curve (jaxflow's min_env_steps_per_iteration)."""
WARM_POINTS = 2
"""Steady rates start at this curve point: past learning_starts (1,000 env steps of sampling
only; SB3 acts at random without its network there, jaxflow's workers act through theirs)
and the compilation of the first gradient steps (SBX's in learn() after learning_starts,
jaxflow's learner's in its first iteration)."""


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    episode_len: int
    steps: int
    """Default env-step budget of a run."""
    quick_steps: int
    device_env: str | None = None
    """The same task as a JAX env, for the device runners."""
    device_many_steps: int = 0
    """Env-step budget of a ``device-many`` run."""
    device_many_quick_steps: int = 0

    @property
    def window(self) -> int:
        """Episodes averaged into a curve's point: those of the last CURVE_STEP env steps."""
        return max(1, CURVE_STEP // self.episode_len)


ENVS = {
    "Pendulum-v1": EnvSpec(
        episode_len=200,
        steps=20_000,
        quick_steps=3_000,
        device_env="gymnax/Pendulum-v1",
        device_many_steps=200_000,
        device_many_quick_steps=40_000,
    ),
    "HalfCheetah-v5": EnvSpec(episode_len=1_000, steps=30_000, quick_steps=3_000),
}
RUNNERS = ("sbx", "driver", "workers", "device", "device-many")
DEVICE_RUNNERS = ("device", "device-many")

# device-many: many envs stepped at once, one SGD step of 256 per 8 env steps (SHARED's is one
# per env step), a longer start and iterations of 10,000 env steps. The replay ratio is lower,
# so it needs several times SBX's env steps for the same return; it is judged on env steps/s
# at that return.
DEVICE_MANY = {
    "device.num_envs": 64,
    "rollout_fragment_length": 1,
    "samples_per_insert": 32.0,
    "learning_starts": 2_000,
    "min_env_steps_per_iteration": 10_000,
}

# The hyperparameters both libraries get, in one place; jaxflow_fields and sbx_kwargs map them
# to each library's names. One SGD step of 256 per env step, taken as 8 steps every 8 env steps
# (jaxflow's fragment of 8 steps from one env; SBX's train_freq=8, gradient_steps=8).
SHARED = {
    "lr": 3e-4,
    "buffer_size": 1_000_000,
    "batch_size": 256,
    "gamma": 0.99,
    "tau": 0.005,
    "learning_starts": 1_000,
    "train_freq": 8,
    "gradient_steps": 8,
    "hidden_sizes": (256, 256),
}
PER_ALGO = {
    "SAC": {"initial_alpha": 1.0},  # target entropy -dim(A) in both
    "TD3": {"lr": 1e-3, "exploration_noise": 0.1, "target_noise": 0.2, "target_noise_clip": 0.5, "policy_delay": 2},
}
PER_ENV_ALGO = {("Pendulum-v1", "SAC"): {"lr": 1e-3}}  # rl-baselines3-zoo's Pendulum setting


def hyperparameters(env: str, algo: str) -> dict[str, Any]:
    return {**SHARED, **PER_ALGO[algo], **PER_ENV_ALGO.get((env, algo), {})}


def jaxflow_fields(hp: dict[str, Any], algo: str, runner: str, workers: int) -> dict[str, Any]:
    """Config fields of a jaxflow run (``env`` and ``seed`` aside)."""
    fields: dict[str, Any] = dict(
        lr=hp["lr"],
        buffer_size=hp["buffer_size"],
        train_batch_size=hp["batch_size"],
        gamma=hp["gamma"],
        tau=hp["tau"],
        learning_starts=hp["learning_starts"],
        rollout_fragment_length=hp["train_freq"],
        num_envs_per_worker=1,
        samples_per_insert=hp["gradient_steps"] * hp["batch_size"] / hp["train_freq"],
        hidden_sizes=tuple(hp["hidden_sizes"]),
        n_step=1,
        target_update_period=1,
        prioritized_replay=False,
        min_env_steps_per_iteration=CURVE_STEP,
    )
    num_workers = workers if runner == "workers" else 0
    if runner == "device":
        fields.update(mode="device", **{"device.num_envs": 1})
    elif runner == "device-many":
        fields.update(mode="device", **DEVICE_MANY)
    else:
        fields.update(mode="ray", num_workers=num_workers)
    if algo == "SAC":
        fields["initial_alpha"] = hp["initial_alpha"]
    else:
        fields.update({k: hp[k] for k in ("exploration_noise", "target_noise", "target_noise_clip", "policy_delay")})
        # SB3 acts uniformly at random until learning_starts; jaxflow's random_steps count per worker.
        fields["random_steps"] = -(-hp["learning_starts"] // max(1, num_workers))
    return fields


def sbx_kwargs(hp: dict[str, Any], algo: str) -> dict[str, Any]:
    """SBX constructor arguments (see ``sbx_run.py`` for ``net_arch`` and ``action_noise_std``)."""
    kwargs: dict[str, Any] = {
        "learning_rate": hp["lr"],
        "buffer_size": hp["buffer_size"],
        "batch_size": hp["batch_size"],
        "gamma": hp["gamma"],
        "tau": hp["tau"],
        "learning_starts": hp["learning_starts"],
        "train_freq": hp["train_freq"],
        "gradient_steps": hp["gradient_steps"],
        "net_arch": list(hp["hidden_sizes"]),
    }
    if algo == "SAC":
        kwargs.update(ent_coef=f"auto_{hp['initial_alpha']}", target_entropy="auto")
    else:
        kwargs.update(
            action_noise_std=hp["exploration_noise"],
            target_policy_noise=hp["target_noise"],
            target_noise_clip=hp["target_noise_clip"],
            policy_delay=hp["policy_delay"],
        )
    return kwargs


@dataclasses.dataclass(frozen=True)
class Mark:
    """Env steps, seconds into the training loop and gradient steps at one curve point."""

    env_steps: int
    seconds: float
    grad_steps: int


@dataclasses.dataclass
class Run:
    """One training run; a run that raised has ``error`` set and None for its measurements."""

    env: str
    algo: str
    runner: str
    seed: int
    load_at_start: float = 0.0
    """The 1-minute load average when the run began (other processes share the CPUs)."""
    build_s: float | None = None
    loop_s: float | None = None
    """Training alone (jaxflow's ``train()`` loop, SBX's ``learn()``), compilation included."""
    env_steps: int | None = None
    grad_steps: int | None = None
    env_steps_per_s: float | None = None
    steady_env_steps_per_s: float | None = None
    """After the second curve point (WARM_POINTS): without the sampling-only start and the
    first gradient steps' compilation, which the libraries place differently."""
    grad_steps_per_s: float | None = None
    """Gradient steps / seconds, both after the second curve point."""
    final_return: float | None = None
    curve: list[list[float | None]] = dataclasses.field(default_factory=list)
    """``[env steps, mean return of the last CURVE_STEP env steps' episodes]`` every CURVE_STEP."""
    error: str | None = None

    def timed(self, build_s: float, loop_s: float, env_steps: int, grad_steps: int, warm: Mark | None) -> None:
        """Fills the rates; ``warm``: the loop at the second curve point."""
        self.build_s, self.loop_s, self.env_steps, self.grad_steps = build_s, loop_s, env_steps, grad_steps
        self.env_steps_per_s = env_steps / loop_s
        if warm and loop_s > warm.seconds and env_steps > warm.env_steps:
            steady_s = loop_s - warm.seconds
            self.steady_env_steps_per_s = (env_steps - warm.env_steps) / steady_s
            self.grad_steps_per_s = (grad_steps - warm.grad_steps) / steady_s
        self.final_return = self.curve[-1][1] if self.curve else None


def nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def run_jaxflow(run: Run, steps: int, workers: int) -> None:
    from jaxflow import Algorithm
    from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED

    spec, hp = ENVS[run.env], hyperparameters(run.env, run.algo)
    env = spec.device_env if run.runner in DEVICE_RUNNERS else run.env
    fields = jaxflow_fields(hp, run.algo, run.runner, workers)
    t0 = time.perf_counter()
    algo = Algorithm.build(run.algo, env=env, seed=run.seed, metrics_num_episodes=spec.window, **fields)
    try:
        t1 = time.perf_counter()
        result: dict[str, Any] = {}
        marks: list[Mark] = []
        while result.get(ENV_STEPS_SAMPLED, 0) < steps:
            result = algo.train()
            sampled, trained = int(result[ENV_STEPS_SAMPLED]), int(result[ENV_STEPS_TRAINED])
            marks.append(Mark(sampled, time.perf_counter() - t1, trained // hp["batch_size"]))
            run.curve.append([sampled, nan_to_none(float(result["episode_return_mean"]))])
        t2 = time.perf_counter()
    finally:
        algo.stop()
    warm = marks[WARM_POINTS - 1] if len(marks) > WARM_POINTS else None
    run.timed(t1 - t0, t2 - t1, marks[-1].env_steps, marks[-1].grad_steps, warm)


def return_curve(episodes: list[list[float]], steps: int, window: int) -> list[list[float | None]]:
    """jaxflow's curve statistic from a list of ``[end step, return]``: at every CURVE_STEP
    env steps, the mean return of the last ``window`` episodes ended by then."""
    curve: list[list[float | None]] = []
    for point in range(CURVE_STEP, steps + 1, CURVE_STEP):
        ended = [r for end, r in episodes if end <= point][-window:]
        curve.append([point, float(np.mean(ended)) if ended else None])
    return curve


def run_sbx(run: Run, steps: int, python: str, workdir: str) -> None:
    """SBX's run in its own environment's Python; ``workdir`` takes MuJoCo's log file."""
    spec = {
        "algo": run.algo,
        "env": run.env,
        "seed": run.seed,
        "steps": steps,
        "mark_every": CURVE_STEP,
        "kwargs": sbx_kwargs(hyperparameters(run.env, run.algo), run.algo),
    }
    proc = subprocess.run(
        [python, os.path.join(HERE, "sbx_run.py"), json.dumps(spec)], capture_output=True, text=True, cwd=workdir
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sbx_run.py exited with {proc.returncode}: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    run.curve = return_curve(out["episodes"], out["env_steps"], ENVS[run.env].window)
    marks = [Mark(int(steps), float(s), int(grad)) for steps, s, grad in out["marks"]]
    warm = marks[WARM_POINTS - 1] if len(marks) > WARM_POINTS else None
    run.timed(out["build_s"], out["loop_s"], out["env_steps"], out["grad_steps"], warm)


def sbx_versions(python: str) -> dict[str, str] | None:
    """The versions installed in SBX's environment, or None if it cannot import them."""
    code = (
        "import json, importlib.metadata as m; import sbx, torch; "
        "print(json.dumps({p: m.version(p) for p in ('sbx-rl', 'torch', 'gymnasium', 'stable_baselines3', 'jax')}))"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def sbx_python(venv: str) -> tuple[str, dict[str, str]]:
    """SBX's environment's Python, made on first use (and remade when its pins changed); the
    same gymnasium version as jaxflow's, so both step the same env code."""
    python = os.path.join(venv, "bin", "python")
    gymnasium = importlib.metadata.version("gymnasium")

    def pinned(v: dict[str, str] | None) -> bool:
        want = {"sbx-rl": SBX_VERSION, "torch": TORCH_VERSION, "gymnasium": gymnasium}
        return v is not None and all(v[p].split("+")[0] == want[p] for p in want)  # torch's is 2.13.0+cpu

    versions = sbx_versions(python) if os.path.exists(python) else None
    if not pinned(versions):
        log(f"making SBX's virtual environment in {venv} (torch {TORCH_VERSION} CPU, sbx-rl {SBX_VERSION})")
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        pip = [python, "-m", "pip", "install", "-q"]
        # torch first: sbx-rl's stable-baselines3 asks for torch, and with none installed pip
        # would take the newest build with several GB of CUDA packages.
        subprocess.run(pip + [f"torch=={TORCH_VERSION}"], check=True)
        subprocess.run(pip + [f"sbx-rl=={SBX_VERSION}", f"gymnasium[mujoco]=={gymnasium}"], check=True)
        versions = sbx_versions(python)
        if not pinned(versions):
            raise RuntimeError(f"SBX's environment in {venv} has {versions}, not the pinned versions")
    assert versions is not None
    return python, versions


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    """Medians over seeds per env x algo x runner, with ratios against SBX's medians."""
    keys = list(dict.fromkeys((r.env, r.algo, r.runner) for r in runs))
    rows = []
    for env, algo, runner in keys:
        mine = [r for r in runs if (r.env, r.algo, r.runner) == (env, algo, runner) and r.error is None]
        row: dict[str, Any] = {"env": env, "algo": algo, "runner": runner, "runs": len(mine)}
        row["failed_runs"] = sum((r.env, r.algo, r.runner) == (env, algo, runner) for r in runs) - len(mine)
        for field in ("env_steps", "build_s", "env_steps_per_s", "steady_env_steps_per_s", "grad_steps_per_s"):
            row[f"median_{field}"] = median_of_measured([getattr(r, field) for r in mine])
        row["median_final_return"] = median_of_measured([r.final_return for r in mine])
        row["median_curve"] = median_curve([r.curve for r in mine])
        rows.append(row)
    for row in rows:
        sbx = next((x for x in rows if (x["env"], x["algo"], x["runner"]) == (row["env"], row["algo"], "sbx")), {})
        for field in ("env_steps_per_s", "steady_env_steps_per_s", "grad_steps_per_s"):
            row[f"{field}_over_sbx"] = ratio(row[f"median_{field}"], sbx.get(f"median_{field}"))
    return rows


def median_curve(curves: list[list[list[float | None]]]) -> list[list[float | None]]:
    """Point by point over seeds (the i-th point of every run): median env steps and return."""
    points = []
    for i in range(min((len(c) for c in curves), default=0)):
        steps = median_of_measured([c[i][0] for c in curves])
        points.append([steps, median_of_measured([c[i][1] for c in curves])])
    return points


def markdown(report: dict[str, Any]) -> str:
    m, a = report["machine"], report["args"]
    load = ", ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    lines = [
        "# SAC and TD3: jaxflow against Stable-Baselines-Jax, same hyperparameters, same run",
        "",
        (
            f"{report['created']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load average at start {load}, "
            f"at end {', '.join(f'{x:.2f}' for x in report['load_average_at_end'])} · jax {m['jax']} · ray {m['ray']} "
            f"· SBX {report['sbx_versions'].get('sbx-rl', '—')} (its jax {report['sbx_versions'].get('jax', '—')}) "
            f"· seeds {a['seeds']}"
        ),
        "",
    ]
    if a["note"]:
        lines += [f"**Note:** {a['note']}", ""]
    lines += [
        (
            f"Rates over the whole training loop (compilation included); steady rates after the first "
            f"{WARM_POINTS * CURVE_STEP:,} env steps (learning_starts, then the first gradient steps and their "
            "compilation). "
            f"Return: mean of the episodes of the last {CURVE_STEP:,} env steps, at the budget. Medians over seeds; "
            "ratios are of medians, against SBX in the same run."
        ),
        "",
        (
            "| env | algo | runner | runs | env steps | env steps/s | steady env steps/s | steady grad steps/s "
            "| final return | env steps/s / SBX | steady / SBX | grad steps/s / SBX | build (s) |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["summary"]:
        failed = f" ({r['failed_runs']} failed)" if r["failed_runs"] else ""
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['runner']} | {r['runs']}{failed} | {fmt(r['median_env_steps'], ',.0f')} "
            f"| {fmt(r['median_env_steps_per_s'], ',.0f')} | {fmt(r['median_steady_env_steps_per_s'], ',.0f')} "
            f"| {fmt(r['median_grad_steps_per_s'], ',.0f')} | {fmt(r['median_final_return'], '.0f')} "
            f"| {fmt(r['env_steps_per_s_over_sbx'], '.2f')} | {fmt(r['steady_env_steps_per_s_over_sbx'], '.2f')} "
            f"| {fmt(r['grad_steps_per_s_over_sbx'], '.2f')} | {fmt(r['median_build_s'], '.1f')} |"
        )
    lines += [
        "",
        (
            "| env | algo | runner | seed | load at start | env steps | loop (s) | env steps/s | steady env steps/s "
            "| steady grad steps/s | final return | error |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['runner']} | {r['seed']} | {r['load_at_start']:.2f} "
            f"| {fmt(r['env_steps'], ',d')} | {fmt(r['loop_s'], '.1f')} | {fmt(r['env_steps_per_s'], ',.0f')} "
            f"| {fmt(r['steady_env_steps_per_s'], ',.0f')} | {fmt(r['grad_steps_per_s'], ',.0f')} | {fmt(r['final_return'], '.0f')} | {r['error'] or ''} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    """Median learning curves, one panel per env (rows) x algo (columns), one line per runner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in report["summary"]))
    algos = list(dict.fromkeys(r["algo"] for r in report["summary"]))
    fig, axes = plt.subplots(len(envs), len(algos), figsize=(5 * len(algos), 3.6 * len(envs)), squeeze=False)
    for (i, env), (j, algo) in itertools.product(enumerate(envs), enumerate(algos)):
        ax = axes[i][j]
        for r in (r for r in report["summary"] if (r["env"], r["algo"]) == (env, algo)):
            points = [(x, y) for x, y in r["median_curve"] if y is not None]
            if points:
                label = f"{r['runner']} ({fmt(r['median_env_steps_per_s'], ',.0f')} steps/s)"
                ax.plot(*zip(*points), marker=".", label=label)
        ax.set_title(f"{algo} on {env}", fontsize=10)
        ax.set_xlabel("env steps")
        ax.set_ylabel(f"training return (median of {len(report['args']['seeds'])} seeds)")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=list(ENVS))
    p.add_argument("--algos", nargs="+", choices=sorted(PER_ALGO), default=list(PER_ALGO))
    p.add_argument("--runners", nargs="+", choices=RUNNERS, default=list(RUNNERS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    for env, spec in ENVS.items():
        flag = env.split("-")[0].lower()
        p.add_argument(f"--{flag}-steps", type=int, default=spec.steps, help=f"env-step budget of a {env} run")
    p.add_argument(
        "--device-many-steps", type=int, default=None, help="env-step budget of a device-many run (default 200,000)"
    )
    p.add_argument("--workers", type=int, default=2, help="rollout workers of the 'workers' runner")
    p.add_argument("--sbx-venv", default=SBX_VENV, help="SBX's virtual environment (made if missing)")
    p.add_argument("--note", default="", help="a line kept in the report (e.g. what else ran on the machine)")
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where continuous.json, .md and .png go")
    p.add_argument("--quick", action="store_true", help="smoke run: first seed only, 3,000 env steps per run")
    args = p.parse_args(argv)
    args.steps = {env: getattr(args, f"{env.split('-')[0].lower()}_steps") for env in ENVS}
    many = {env: args.device_many_steps or spec.device_many_steps for env, spec in ENVS.items()}
    if args.quick:
        args.seeds, args.steps = args.seeds[:1], {env: spec.quick_steps for env, spec in ENVS.items()}
        many = {env: spec.device_many_quick_steps for env, spec in ENVS.items()}
    args.budgets = {(env, r): many[env] if r == "device-many" else args.steps[env] for env in ENVS for r in RUNNERS}
    least_many = (WARM_POINTS + 1) * DEVICE_MANY["min_env_steps_per_iteration"]
    if "device-many" in args.runners and min(b for b in many.values() if b) < least_many:
        p.error(f"a device-many budget must be at least {least_many:,} env steps")
    least = (WARM_POINTS + 1) * CURVE_STEP  # one curve point past the warm one, for the steady rates
    if min(args.steps.values()) < least or args.workers < 1:
        p.error(f"each budget must be at least {least:,} env steps and --workers at least 1")
    return args


def one_run(run: Run, args: argparse.Namespace, python: str | None) -> Run:
    log(f"{run.env} {run.algo} {run.runner} seed={run.seed}")
    try:
        if run.runner == "sbx":
            assert python is not None
            run_sbx(run, args.budgets[run.env, run.runner], python, args.out_dir)
        else:
            run_jaxflow(run, args.budgets[run.env, run.runner], args.workers)
    except Exception as e:
        traceback.print_exc()
        run.error = f"{type(e).__name__}: {e}"[:500]
    log(
        f"  {fmt(run.env_steps, ',d')} env steps in {fmt(run.loop_s, '.1f')} s: {fmt(run.env_steps_per_s, ',.0f')} "
        f"env steps/s (steady {fmt(run.steady_env_steps_per_s, ',.0f')}), {fmt(run.grad_steps_per_s, ',.0f')} grad steps/s, return {fmt(run.final_return, '.0f')}"
        f"{'; ERROR ' + run.error if run.error else ''}"
    )
    return run


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    python, versions = sbx_python(args.sbx_venv) if "sbx" in args.runners else (None, {})
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    runs: list[Run] = []
    try:
        machine = machine_info()
        for env in args.envs:
            runners = [r for r in args.runners if r not in DEVICE_RUNNERS or ENVS[env].device_env]
            for algo in args.algos:
                # The runners take turns within each seed, in an order reversed from seed to
                # seed, so that a drift in the machine's load touches all of them alike.
                for i, seed in enumerate(args.seeds):
                    for runner in runners if i % 2 == 0 else runners[::-1]:
                        run = Run(env, algo, runner, seed, load_at_start=os.getloadavg()[0])
                        runs.append(one_run(run, args, python))
    finally:
        ray.shutdown()
    report = {
        "benchmark": "continuous",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k not in ("out_dir", "sbx_venv", "budgets")},
        "machine": machine,
        "load_average_at_end": list(os.getloadavg()),
        "sbx_versions": versions,
        "hyperparameters": {
            f"{env} {algo}": {
                "shared": hyperparameters(env, algo),
                "jaxflow": {r: jaxflow_fields(hyperparameters(env, algo), algo, r, args.workers) for r in RUNNERS[1:]},
                "sbx": sbx_kwargs(hyperparameters(env, algo), algo),
            }
            for env in args.envs
            for algo in args.algos
        },
        "summary": summarize(runs),
        "runs": [dataclasses.asdict(r) for r in runs],
    }
    write_report(args.out_dir, "continuous", report, markdown(report))
    plot(report, os.path.join(args.out_dir, "continuous.png"))


if __name__ == "__main__":
    main()
