"""The experiment trackers a run logs to, checked before it starts (before Ray, before its
logdir is claimed): each problem one :class:`ConfigError` line naming the logger and what to do.

* ``wandb`` and ``mlflow`` need their packages (:func:`~jaxflow.api.loggers.tracker_module`).
* ``wandb`` in online mode (``WANDB_MODE`` unset or ``online``) needs credentials: W&B's own
  lookup, without the network and without a prompt (``WANDB_API_KEY``, a netrc entry from
  ``wandb login``, an identity token file, W&B's settings), so a run without them is refused
  here instead of failing in ``wandb.init`` once the run has started.
* ``mlflow`` with ``MLFLOW_TRACKING_URI`` set needs a store that MLflow takes and that can be
  reached: a server that accepts a connection within :data:`TRACKING_PROBE_TIMEOUT_S`, or a
  local folder that can be written. Without it the run's own ``mlruns/`` is used, which the
  logdir's checks cover.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from jaxflow.api.loggers import is_file_store, quiet_wandb, tracker_module
from jaxflow.api.user_errors import one_line
from jaxflow.config.fields import ConfigError

WANDB_LOCAL_MODES = ("offline", "dryrun", "disabled")
"""``WANDB_MODE`` values whose runs need no W&B account: kept in the logdir, or not written."""
TRACKING_PROBE_TIMEOUT_S = 5.0
"""How long an MLflow server named by ``MLFLOW_TRACKING_URI`` may take to accept a connection;
MLflow's client itself retries a dead server for minutes."""
DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port of an ``http(s)`` tracking URI that names none."""
MAX_REASON_CHARS = 200
"""How much of a tracker's own error a refusal quotes: MLflow's run to a paragraph."""
MLFLOW_FIX = (
    "set MLFLOW_TRACKING_URI to a running MLflow server (http://HOST:PORT) or a writable folder (file:/PATH), "
    "or unset it to keep the run in the logdir's mlruns/."
)
WANDB_OFFLINE = "set WANDB_MODE=offline to keep the run in the logdir (`wandb sync` uploads it later)"
TRACKER_FIXES = {
    "wandb": f"check W&B's settings (WANDB_* variables, `wandb login`), or {WANDB_OFFLINE}.",
    "mlflow": MLFLOW_FIX,
}
"""What to do where a tracker's run cannot be started after its checks passed (:func:`starting`)."""


def check_trackers(loggers: Sequence[str]) -> None:
    """Raises a one-line :class:`ConfigError` where one of ``loggers`` (parsed names) cannot
    write this run: its package, its credentials or its store (the module's rules)."""
    if "wandb" in loggers:
        _check_wandb()
    if "mlflow" in loggers:
        _check_mlflow()


@contextlib.contextmanager
def starting(logger: str) -> Iterator[None]:
    """A writer of ``logger`` being opened: a tracker's failure to start its run (a server that
    refuses it, a store that cannot be written) becomes one :class:`ConfigError` line naming
    the logger and what to do, its traceback kept as the cause (``--debug`` shows it)."""
    try:
        yield
    except Exception as e:
        if logger not in TRACKER_FIXES or isinstance(e, ConfigError):
            raise
        raise ConfigError(
            f"--logger {logger}: its run could not be started ({_reason(e)}); {TRACKER_FIXES[logger]}"
        ) from e


def _check_wandb() -> None:
    """W&B's package, and in online mode its credentials, found without the network."""
    wandb = quiet_wandb()
    mode = os.environ.get("WANDB_MODE")  # what WandbWriter runs in: online where unset
    if mode in WANDB_LOCAL_MODES:
        return
    online = f"WANDB_MODE={mode}" if mode else "WANDB_MODE is unset (online)"
    try:
        found = _wandb_credentials(wandb)
    except wandb.errors.Error as e:  # a key of the wrong form, an unreadable token file
        raise ConfigError(
            f"--logger wandb: W&B's credentials cannot be used ({_reason(e)}); run `wandb login --relogin`, "
            f"or {WANDB_OFFLINE}."
        ) from None
    if not found:
        raise ConfigError(
            f"--logger wandb: {online} but no W&B API key is configured (WANDB_API_KEY, "
            f"or `wandb login`'s netrc entry); run `wandb login`, set WANDB_API_KEY, or {WANDB_OFFLINE}."
        )


def _wandb_credentials(wandb: Any) -> bool:
    """Whether W&B finds credentials without asking: its ``login(prompt=False)`` where it has one
    (it reads the key, netrc, identity token and settings, and neither prompts nor verifies
    online), else the older ``wandb.api.api_key`` (key, netrc and settings)."""
    login = wandb.login
    if "prompt" in inspect.signature(login).parameters:
        return bool(login(prompt=False, verify=False))
    return bool(wandb.api.api_key)


def _check_mlflow() -> None:
    """MLflow's package, and the store ``MLFLOW_TRACKING_URI`` names, where it names one."""
    mlflow = tracker_module("mlflow", "mlflow")
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return  # the logdir's mlruns/: the logdir's own checks cover it
    if is_file_store(uri):
        _check_folder(uri)
        return
    scheme = urlsplit(uri).scheme
    if scheme in DEFAULT_PORTS:
        _probe(uri, scheme)
    try:
        mlflow.tracking.MlflowClient(uri)  # an unknown scheme, or one whose store is not installed
    except Exception as e:  # MLflow's errors for a URI it cannot use have no common base
        raise ConfigError(
            f"--logger mlflow: MLFLOW_TRACKING_URI {uri!r} cannot be used ({_reason(e)}); {MLFLOW_FIX}"
        ) from None


def _check_folder(uri: str) -> None:
    """A file store's folder: an existing writable directory, or one that can be created."""
    path = unquote(urlsplit(uri).path) if uri.startswith("file:") else uri
    found = os.path.abspath(path)
    while not os.path.lexists(found):
        found = os.path.dirname(found)
    if not os.path.isdir(found) or not os.access(found, os.W_OK):
        why = "is a file" if not os.path.isdir(found) else "is not writable"
        raise ConfigError(
            f"--logger mlflow: MLFLOW_TRACKING_URI {uri!r} cannot be written ({found!r} {why}); {MLFLOW_FIX}"
        )


def _probe(uri: str, scheme: str) -> None:
    """Refuses an ``http(s)`` tracking server where nothing accepts a connection within the probe's timeout."""
    try:
        parts = urlsplit(uri)
        address = (parts.hostname or "", parts.port or DEFAULT_PORTS[scheme])
        socket.create_connection(address, timeout=TRACKING_PROBE_TIMEOUT_S).close()
    except (OSError, ValueError) as e:  # ValueError: a port that is no number
        raise ConfigError(
            f"--logger mlflow: no MLflow server answers at MLFLOW_TRACKING_URI {uri!r} ({getattr(e, 'strerror', None) or e}); {MLFLOW_FIX}"
        ) from None


def _reason(error: BaseException) -> str:
    """``error``'s message on one line, cut to :data:`MAX_REASON_CHARS`."""
    text = one_line(error)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."
