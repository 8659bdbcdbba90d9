"""The signal handlers of a training loop: the first SIGINT or SIGTERM is recorded, the second
stops at once, and the handlers found before are back afterwards; none is installed outside the
main thread, and a signal ignored before stays ignored. Real signals, sent to this process."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from jaxflow.api import interrupts

DELIVERY_S = 0.1
"""How long to let a signal sent to this process reach a handler that shows nothing (POSIX
delivers a signal a process sends itself before ``kill`` returns; Python runs the handler at
its next bytecode in the main thread)."""
HANDLED_WITHIN_S = 10.0
"""How long to wait for a handler that shows it ran: another thread may take the signal, and
on a loaded machine the main thread may wait to run, past ``DELIVERY_S`` (a CI run's 0.1 s)."""


def _signal_self(signum: int, handled: Callable[[], bool] | None = None) -> None:
    """Sends ``signum`` to this process and lets its handler run (in this, the main thread):
    until ``handled()`` (or the handler raises), else for :data:`DELIVERY_S`."""
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + (DELIVERY_S if handled is None else HANDLED_WITHIN_S)
    while time.monotonic() < deadline and not (handled is not None and handled()):
        time.sleep(0.01)  # the handler runs between these bytecodes


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_is_recorded_and_the_second_stops_at_once(signum, capsys):
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    with pytest.raises(interrupts.Interrupted) as stopped:
        with interrupts.deferred(lambda s: f"saving after {signal.Signals(s).name}") as caught:
            _signal_self(signum, lambda: caught.signum is not None)
            assert caught.signum == signum and caught.again is None
            _signal_self(signum, lambda: False)  # its handler raises
    assert stopped.value.exit_status == 128 + signum and caught.again == signum
    assert capsys.readouterr().err == f"saving after {signal.Signals(signum).name}\n"  # said once, at the first
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before


def test_outside_the_main_thread_nothing_is_installed():
    seen = {}

    def loop() -> None:
        with interrupts.deferred(str) as caught:
            seen["handler"] = signal.getsignal(signal.SIGTERM)
            seen["caught"] = caught.signum

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    assert seen == {"handler": before, "caught": None}


def test_a_signal_ignored_before_stays_ignored():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as under nohup
    try:
        with interrupts.deferred(str) as caught:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            _signal_self(signal.SIGTERM)
            assert caught.signum is None
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_raises_like_ctrl_c_and_the_command_line_says_it_in_one_line(capsys):
    def command(argv):
        _signal_self(signal.SIGTERM, lambda: False)  # its handler raises
        return 0

    assert interrupts.interruptible(command, []) == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "jaxflow: interrupted by SIGTERM, stopped at once\n"
