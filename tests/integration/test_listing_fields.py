"""``jaxflow list`` (issue 44): every algorithm listed where it fits, a discrete env without the
continuous algorithms, no heading over nothing; its cache, which the next listing reads without
JAX, gymnasium or Ray and which any install or edit replaces; ``--fields``, each setting of a
config with its group, default and docstring; and the line a run with no ``--stop`` prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from jaxflow.api import cli
from jaxflow.api.listing_cache import ListingCache
from jaxflow.api.registry import get_algorithm
from jaxflow.api.stops import DEFAULT_ITERATIONS, DEFAULT_STOP_NOTE
from jaxflow.config.names import flat_names

LIST_TIMEOUT_S = 300
"""The first listing makes every env (about 10 s of CPU; minutes on a loaded machine)."""
LIST = (
    "import sys; from jaxflow.api import cli; status = cli.main(); "
    "print('loaded:', *sorted(m for m in ('jax', 'gymnasium', 'ray') if m in sys.modules), file=sys.stderr); "
    "sys.exit(status)"
)
"""``jaxflow ARGS`` as the command runs it (``cli.main()`` reads ``sys.argv``), then which of the
heavy libraries the process loaded, on stderr."""
CONTINUOUS = {"SAC", "TD3", "DDPG", "APEX_DDPG"}
"""The algorithms that act in Box action spaces only."""
DISCRETE_ONLY = {"DQN", "APEX", "R2D2", "Rainbow", "MAML"}


def jaxflow_list(cache: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAXFLOW_LIST_CACHE": cache}
    done = subprocess.run(
        [sys.executable, "-c", LIST, "list", *args], capture_output=True, text=True, timeout=LIST_TIMEOUT_S, env=env
    )
    assert done.returncode == 0, done.stderr
    return done


def rows(out: str) -> dict[str, str]:
    """Each listed env's line by its id."""
    return {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}


def fitting(line: str) -> set[str]:
    """The algorithms at the end of an env's line (after its action space)."""
    return set(line.split(" act ", 1)[-1].split()[1:]) if " act " in line else set(line.split()[1:])


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    """``jaxflow list`` twice on one cache folder: the first makes every env, the second reads
    the cache; ``(cache folder, first, second)``."""
    cache = str(tmp_path_factory.mktemp("list-cache"))
    return cache, jaxflow_list(cache), jaxflow_list(cache)


def test_every_algorithm_is_listed_where_it_fits(listed):
    _, first, _ = listed
    out = first.stdout
    algorithms = out.splitlines()[0].removeprefix("algorithms: ").split(", ")
    envs = rows(out)
    assert {"ES", "ARS", "DDPPO", "MAML"} <= set(algorithms)
    for name in algorithms:  # each in some env's column
        assert any(name in fitting(line) for line in envs.values()), name
    assert {"ES", "ARS", "DDPPO", "DQN"} <= fitting(envs["CartPole-v1"])
    assert {"ES", "ARS", "DDPPO", "SAC", "TD3"} <= fitting(envs["Pendulum-v1"])
    assert {"ES", "ARS"} <= fitting(envs["gymnax/CartPole-v1"]) and "DDPPO" not in fitting(envs["gymnax/CartPole-v1"])
    for task in ("tasks/CartPoleLengths-v0", "tasks/PointNavigation-v0"):  # MAML trains task distributions
        assert fitting(envs[task]) == {"MAML"} and "act Discrete(" in envs[task]
    assert all("MAML" not in fitting(line) for env, line in envs.items() if not env.startswith("tasks/"))
    brax = next(line for line in out.splitlines() if line.startswith("  (Box actions, device mode:"))
    assert "ES" not in brax.split() and "SAC" in brax  # ES's device mode runs gymnax envs only


def test_a_discrete_env_lists_no_continuous_algorithm(listed):
    _, first, _ = listed
    envs = rows(first.stdout)
    cliff = envs["tabular/CliffWalking-v0"]  # gymnasium declares its 4 moves as Box(0, 3, (1,), int32)
    assert "act Discrete(4)" in cliff and {"DQN", "PPO"} <= fitting(cliff) and not CONTINUOUS & fitting(cliff)
    for env, line in envs.items():
        if "act Discrete(" in line or "act MultiDiscrete(" in line:
            assert not CONTINUOUS & fitting(line), env
        if "act Box(" in line:
            assert not DISCRETE_ONLY & fitting(line), env


def test_the_next_listing_reads_the_cache_without_jax(listed):
    cache, first, second = listed
    assert second.stdout == first.stdout
    assert "jaxflow: making the gymnasium environments for their spaces" in first.stderr
    assert f"jaxflow: cached in {cache}" in first.stderr
    assert "jaxflow: making" not in second.stderr and "jaxflow: listed from the cache made" in second.stderr
    assert "loaded: gymnasium jax" in first.stderr  # the first listing makes every env
    assert "loaded:\n" in second.stderr  # the second loads neither JAX nor gymnasium nor Ray
    (name,) = os.listdir(cache)  # one file, named by the install's fingerprint
    assert re.fullmatch(r"listing-[0-9a-f]{16}\.json", name) and os.path.join(cache, name) in second.stderr


def test_fields_are_cached_with_the_listing(listed):
    cache = listed[0]
    first, second = (jaxflow_list(cache, "--algo", "PPO", "--fields") for _ in range(2))
    assert second.stdout == first.stdout and "  clip_eps = 0.2\n" in first.stdout
    assert "loaded:\n" in second.stderr and "listed from the cache made" in second.stderr


def test_a_kind_with_nothing_to_show_has_no_heading(listed):
    cache = listed[0]
    maml = jaxflow_list(cache, "--algo", "maml").stdout
    assert "task distributions (2 you can train" in maml and "environments (" not in maml
    assert set(rows(maml)) == {"tasks/CartPoleLengths-v0", "tasks/PointNavigation-v0"}
    es = jaxflow_list(cache, "--algo", "ES", "--kind", "brax").stdout
    assert "brax environments" not in es and es.splitlines()[-1] == "no brax environment here that ES can train"
    rainbow = jaxflow_list(cache, "--algo", "rainbow", "--kind", "multiagent").stdout  # names are case-insensitive
    assert len(rows(rainbow)) == 3 and all("Rainbow" in line for line in rows(rainbow).values())


def test_the_cache_is_replaced_by_any_install(tmp_path, monkeypatch):
    """A distribution installed, upgraded or reinstalled on ``sys.path`` names another file:
    the listing is made again, and the file of the install before is removed."""
    site = tmp_path / "site"
    (site / "mypackage-1.0.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    made: list[str] = []

    def make(value: str):
        return lambda: made.append(value) or value

    first = ListingCache(str(tmp_path / "cache"))
    assert first.get("section", make("one")) == "one" and not first.reused
    again = ListingCache(str(tmp_path / "cache"))
    assert again.path == first.path and again.get("section", make("two")) == "one" and again.reused
    (site / "mypackage-1.0.dist-info").rename(site / "mypackage-1.1.dist-info")  # an upgrade
    upgraded = ListingCache(str(tmp_path / "cache"))
    assert upgraded.path != first.path and upgraded.get("section", make("three")) == "three"
    assert upgraded.get("other", make("kept")) == "kept"
    assert os.listdir(tmp_path / "cache") == [os.path.basename(upgraded.path)]
    assert ListingCache(str(tmp_path / "cache"), refresh=True).get("section", make("four")) == "four"
    assert ListingCache(str(tmp_path / "cache")).get("other", make("remade")) == "kept"  # --refresh: what it lists
    with open(upgraded.path, "w") as f:  # not a listing: made again
        f.write("{broken")
    assert ListingCache(str(tmp_path / "cache")).get("section", make("five")) == "five"
    assert made == ["one", "three", "kept", "four", "five"]
    with open(upgraded.path) as f:
        assert json.load(f)["section"] == "five"


def sections(out: str) -> dict[str, dict[str, tuple[str, str]]]:
    """``--fields``' output: each group's heading, and in it each setting's default and the
    first line of its docstring."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    lines = out.splitlines()
    heading = ""
    for i, line in enumerate(lines):
        if line and not line.startswith(" "):
            heading = line
            found[heading] = {}
        elif line.startswith("  ") and not line.startswith("   ") and " = " in line and heading:
            name, default = line.strip().split(" = ", 1)
            doc = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith("      ") else ""
            found[heading][name] = (default, doc)
    return found


def test_fields_show_each_setting_with_its_group_default_and_doc(capsys):
    assert cli.main(["list", "--algo", "ppo", "--fields"]) == 0
    groups = sections(capsys.readouterr().out)
    by_name = {name: heading for heading, fields in groups.items() for name in fields}
    own = next(h for h in groups if h.startswith("PPOConfig: "))
    assert groups[own]["clip_eps"] == ("0.2", "Clipping of the probability ratio, epsilon in the paper; must be > 0.")
    assert by_name["num_workers"].startswith("rollout (RolloutConfig): ")
    assert groups[by_name["num_envs_per_worker"]]["num_envs_per_worker"][0] == "16"  # PPO's own rollout default
    assert groups[by_name["lr"]]["lr"] == ("0.001", "Learning rate of the Adam optimizer.")
    assert groups[by_name["gamma"]]["gamma"] == ("0.99", "Discount factor.")
    assert by_name["gamma"].startswith("CommonConfig: ")
    settings = [name for fields in groups.values() for name in fields]
    assert sorted(settings) == sorted(flat_names(get_algorithm("PPO").config_cls))  # each once
    assert all(doc for fields in groups.values() for _, doc in fields.values())  # every one documented


def test_fields_of_an_off_policy_algorithm_name_its_shared_part(capsys):
    assert cli.main(["list", "--algo", "DQN", "--fields"]) == 0
    groups = sections(capsys.readouterr().out)
    by_name = {name: heading for heading, fields in groups.items() for name in fields}
    assert by_name["buffer_size"].startswith("OffPolicyConfig: ") and by_name["n_step"] == by_name["buffer_size"]
    assert by_name["double_q"].startswith("DQNConfig: ") and by_name["gamma"].startswith("CommonConfig: ")
    assert groups[by_name["double_q"]]["double_q"][0] == "True"


def train_output(tmp_path, capsys, *flags: str) -> list[str]:
    """A tiny PPO run's stdout lines (16 env steps an iteration, in this process)."""
    sizes = ["num_envs_per_worker=1", "rollout_fragment_length=16", "train_batch_size=16", "minibatch_size=16"]
    argv = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "0", "--logdir", str(tmp_path)]
    for item in [*sizes, "num_epochs=1", "hidden_sizes=8"]:
        argv += ["--set", item]
    assert cli.main([*argv, "--checkpoint-every", "1000", *flags]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_run_without_stop_says_when_it_stops(tmp_path, capsys):
    out = train_output(tmp_path / "default", capsys)
    assert out.count(DEFAULT_STOP_NOTE) == 1 and "stops at training iteration 100 (the default)" in DEFAULT_STOP_NOTE
    assert out[-1].startswith(f"done: iteration {DEFAULT_ITERATIONS}, ")
    given = train_output(tmp_path / "given", capsys, "--stop", "training_iteration=2")
    assert DEFAULT_STOP_NOTE not in given and given[-1].startswith("done: iteration 2, ")
