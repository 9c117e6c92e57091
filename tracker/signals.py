"""Ctrl-C and SIGTERM, handled one way everywhere.

``interruptible()`` makes SIGTERM raise ``Interrupted`` (a KeyboardInterrupt) for the length of a
run or an experiment, so that one code path marks it interrupted. ``held()`` holds both signals
until its block ends, then raises the first: a transaction cut in the middle can keep SQLite's
write lock until its connection is collected, and a row cut between its insert and the code that
marks it would stay ``running``. Held blocks nest; only the outermost holds and raises.

A signal the process was started with ignored (``nohup``, a background job) stays ignored, and
outside the main thread signals are not ours to touch.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from tracker.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_caught: list[int] | None = None  # signals that arrived while held; None when nothing holds them


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _ours(signum: int) -> bool:
    return _main_thread() and signal.getsignal(signum) is not signal.SIG_IGN


def raise_for(signum: int) -> NoReturn:
    """What a signal is in Python: Ctrl-C a KeyboardInterrupt, SIGTERM an ``Interrupted``."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(f"signal {signum}")


def raise_from_now() -> None:
    """SIGTERM raises ``Interrupted`` from now on, as Ctrl-C raises KeyboardInterrupt: the command's
    first step (``tracker.__main__``), so that no moment of it dies of a signal silently."""
    if _ours(signal.SIGTERM):
        signal.signal(signal.SIGTERM, lambda number, frame: raise_for(number))


def hold_to_exit() -> bool:
    """Hold both signals for the rest of the process (nothing is left to interrupt: they would only
    cut its exit short), and say whether one is already waiting."""
    if not hasattr(signal, "pthread_sigmask") or not _main_thread():
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    return bool(signal.sigpending() & set(SIGNALS))


@contextmanager
def held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then raise the first that came."""
    global _caught
    if _caught is not None or not _main_thread():  # an outer block holds them, or they are not ours
        yield
        return
    caught: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda number, frame: caught.append(number))
        for signum in SIGNALS
        if _ours(signum)
    }
    _caught = caught
    try:
        yield
    finally:
        _caught = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        raise_for(caught[0])


def pending() -> int | None:
    """The first signal held so far in the block that holds them (to stop work early), or None."""
    return _caught[0] if _caught else None


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM raises ``Interrupted`` in the block, as Ctrl-C raises KeyboardInterrupt."""
    if not _ours(signal.SIGTERM):
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda number, frame: raise_for(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
