"""The one exceptions module. Each message says what went wrong and, where it can, what to do.

The CLI turns a TrackerError into a one-line error and a non-zero exit; nothing else catches it.
"""


class TrackerError(Exception):
    """Bad input or a state tracker cannot work with; the message is for the user."""


class UnknownName(TrackerError):
    """An unknown network, device, variant or option value."""


class StoreError(TrackerError):
    """The trace database cannot be opened, is not a tracker database, or refused a statement."""


class BackendUnavailable(TrackerError):
    """The requested profiling backend cannot run on this machine."""


class ProfilerFailed(TrackerError):
    """A counter profiler (ncu, nvprof) ran but did not produce usable output."""


class NcuFailed(ProfilerFailed):
    """Nsight Compute ran but did not produce a usable report."""


class ParseError(TrackerError):
    """Output of a profiler that cannot be read: says which file and what is wrong."""


class JoinError(TrackerError):
    """Pass 2 does not line up with pass 1."""


class Mismatch(TrackerError):
    """Two runs that cannot be compared layer by layer."""


class OutOfMemory(TrackerError):
    """The device ran out of memory for the workload: an answer of a memory study (an arm that
    records it), not a crash."""


class ArmTaken(TrackerError):
    """An experiment's arm was not queued when this process came to claim it: another process
    holds or ended it."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that one code path marks a run interrupted."""


def first_line(exc: BaseException) -> str:
    """An exception's message as a one-line error repeats it: its first line, else its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


NAME_ECHO = 40  # characters of an unknown name an error repeats


def shorten(text: str, limit: int = NAME_ECHO) -> str:
    """``text`` as an error repeats it: its first ``limit`` characters, then '…' if it goes on."""
    return text if len(text) <= limit else text[:limit] + "…"


def is_digits(text: str) -> bool:
    """Whether ``text`` is a whole number as tracker takes one: ASCII digits and nothing else.
    Python's int() also takes '1_0', ' 8', '+1' and other scripts' digits; tracker takes none."""
    return text.isascii() and text.isdigit()


def whole_number(value: object, what: str, low: int, high: int | None = None) -> int:
    """``value``, an int (not a bool), from ``low`` to ``high`` (None: no upper bound), or a one-line
    error naming ``what``: the rule every count obeys, passed to the library or read from text."""
    if isinstance(value, bool) or not isinstance(value, int):
        shown = f"'{shorten(value)}'" if isinstance(value, str) else shorten(repr(value))
        raise TrackerError(f"{what}: {shown} is not a whole number (digits only)")
    if value < low or (high is not None and value > high):
        shown = str(value) if value.bit_length() <= 64 else "of over 19 digits"  # no str() of 4,300 digits
        raise TrackerError(f"{what} {shown} is out of range {low}..{'' if high is None else high}")
    return value


def parse_whole_number(text: str, what: str, low: int, high: int | None = None) -> int:
    """``text`` read as ``whole_number`` where it is digits only (``is_digits``), else the same error."""
    if not is_digits(text):
        return whole_number(text, what, low, high)
    return whole_number(int(text) if len(text) <= MAX_DIGITS else 2**64, what, low, high)  # 2**64: any longer one


MAX_DIGITS = 19  # the longest whole number read from text: a 64-bit database id fits


def comma_list(text: str, what: str, example: str) -> list[str]:
    """The items of a comma-separated option (``--batches 16,64``), stripped: the one place lists
    are split, so that an empty list or item is refused everywhere rather than read as a default."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        wrong = f"'{shorten(text)}' has an empty item" if text.strip() else "is empty"
        raise TrackerError(f"{what} {wrong}: give a comma-separated list, e.g. {example}")
    return items


def did_you_mean(name: str, known: list[str]) -> str:
    """' (did you mean X?)' when a known name is close to ``name``, else ''."""
    import difflib

    # A match needs a ratio 2M / (len(name) + len(known)) of 0.6, M <= the shorter length: a name
    # over 7/3 the longest known one can match none, so a huge argument costs nothing.
    if 3 * len(name) > 7 * max(map(len, known), default=0):
        return ""
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown(what: str, name: str, known: list[str]) -> UnknownName:
    return UnknownName(f"unknown {what} '{shorten(name)}'{did_you_mean(name, known)}; known: {', '.join(known)}")
