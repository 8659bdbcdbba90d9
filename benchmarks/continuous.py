"""SAC and TD3 on Pendulum-v1 and HalfCheetah-v5 for a fixed env-step budget, against
Stable-Baselines-Jax (SBX) with the same hyperparameters, measured in the same run.

Runners: ``sbx`` (SBX in its own virtual environment, ``benchmarks/.venvs/sbx``, made on
first use: torch's local CPU build first, then ``sbx-rl``), ``driver`` (jaxflow, sampling
in the driver: ``num_workers=0``, one learner), ``workers`` (``--workers`` rollout workers)
``device`` (jaxflow's device mode on ``gymnax/Pendulum-v1``, one env; Pendulum only) and
``device-many`` (device mode with ``--device-envs`` envs, on ``gymnax/Pendulum-v1`` or
``brax/halfcheetah``, and a lower replay ratio, for a longer budget: env steps/s at the return
SBX reaches). Each reports env steps/s, gradient steps/s and the training return at equal env steps, medians
over seeds, and ratios against SBX's medians.

Each also reports the CPU time per gradient step, which the machine's load changes far less
than the wall clock. Settings in ``continuous_settings.py``, the report in ``continuous_report.py``.

Writes ``benchmarks/results/continuous.json``, ``.md`` and ``.png`` (learning curves) and
prints the Markdown report. Command lines: see ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any

import numpy as np
from common import argument_parser, cpu_clock, fmt, logger, machine_info, write_report
from continuous_report import markdown, plot, summarize
from continuous_settings import (
    CURVE_STEP,
    DEVICE_MANY,
    DEVICE_RUNNERS,
    ENVS,
    PER_ALGO,
    RUNNERS,
    WARM_POINTS,
    Mark,
    Run,
    hyperparameters,
    jaxflow_fields,
    nan_to_none,
    sbx_kwargs,
)

log = logger("continuous")

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
SBX_VENV = os.path.join(HERE, ".venvs", "sbx")
SBX_VERSION = "0.28.0"
TORCH_VERSION = "2.13.0"  # the local CPU build; any other torch pip finds comes with CUDA packages


def run_jaxflow(run: Run, steps: int, args: argparse.Namespace) -> None:
    from jaxflow import Algorithm
    from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED

    spec, hp = ENVS[run.env], hyperparameters(run.env, run.algo)
    env = spec.device_env if run.runner in DEVICE_RUNNERS else run.env
    fields = jaxflow_fields(hp, run.algo, run.runner, args.workers, args.device_envs)
    if env.startswith("brax/") and args.brax_backend:
        fields["env_config"] = {"backend": args.brax_backend}
    t0 = time.perf_counter()
    algo = Algorithm.build(run.algo, env=env, seed=run.seed, metrics_num_episodes=spec.window, **fields)
    try:
        workers = [h for _, h in algo.program.workers.live()] if run.runner == "workers" else []
        cpu = cpu_clock([*getattr(algo.replay, "actors", []), *workers])
        t1, cpu1 = time.perf_counter(), cpu()
        result: dict[str, Any] = {}
        marks: list[Mark] = []
        while result.get(ENV_STEPS_SAMPLED, 0) < steps:
            result = algo.train()
            sampled, trained = int(result[ENV_STEPS_SAMPLED]), int(result[ENV_STEPS_TRAINED])
            cpu_s = cpu() - cpu1
            marks.append(Mark(sampled, time.perf_counter() - t1, trained // hp["batch_size"], cpu_s))
            run.curve.append([sampled, nan_to_none(float(result["episode_return_mean"]))])
    finally:
        algo.stop()
    run.timed(t1 - t0, marks)


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
    marks = [Mark(int(steps), float(s), int(grad), float(cpu)) for steps, s, grad, cpu in out["marks"]]
    end = Mark(out["env_steps"], out["loop_s"], out["grad_steps"], out["loop_cpu_s"])
    run.timed(out["build_s"], marks if marks and marks[-1].env_steps == end.env_steps else [*marks, end])


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
        "--device-many-steps",
        type=int,
        default=None,
        help="env-step budget of a device-many run (default 200,000)",
    )
    p.add_argument("--workers", type=int, default=2, help="rollout workers of the 'workers' runner")
    p.add_argument(
        "--device-envs", type=int, default=DEVICE_MANY["device.num_envs"], help="envs of a device-many run (GPU: 2048)"
    )
    p.add_argument("--brax-backend", default=None, help="brax's pipeline for brax/ envs (default: jaxflow's, spring)")
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
            run_jaxflow(run, args.budgets[run.env, run.runner], args)
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
            spec = ENVS[env]
            runners = [
                r for r in args.runners if r not in DEVICE_RUNNERS or (spec.device_env and r in spec.device_runners)
            ]
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
                "jaxflow": {
                    r: jaxflow_fields(hyperparameters(env, algo), algo, r, args.workers, args.device_envs)
                    for r in RUNNERS[1:]
                },
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
