"""What both runners of user SQL share: the limits a query runs under, the ``Answer`` it gives,
and the rows as they are handed on (values made plain, a signal raised between fetches)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tracker.errors import StoreError, shorten
from tracker.signals import pending, raise_for
from tracker.store.queries import plain

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 86_400.0  # a day: a longer limit is a typo (PostgreSQL's statement_timeout holds 24 days)
MAX_ROWS = 10**12  # a row limit beyond any store's rows (islice takes up to sys.maxsize)
ONE_QUERY = " (tracker sql runs one read-only query: SELECT, WITH or VALUES)"
ONE_STATEMENT = "refused: tracker sql is read-only and runs one statement at a time"
FETCH_ROWS = 1000
FETCH_BYTES = 16 << 20  # a fetch holds about this many bytes at most: SQLite ends its batch, PostgreSQL refuses more


@dataclass
class Answer:
    """An open query: its columns, then its rows as they are fetched (values made plain: JSON text
    as lists, datetimes as ISO strings), and anything the user should know (``notes``)."""

    columns: list[str]
    rows: Iterator[tuple]
    notes: list[str] = field(default_factory=list)


def time_limit(timeout_s: float | None) -> float:
    """``timeout_s`` checked where it enters (None: ``DEFAULT_TIMEOUT_S``): seconds, finite, above 0."""
    if timeout_s is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise StoreError(
            f"the time limit must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}, not {_shown(timeout_s)}"
        )
    return float(timeout_s)


def row_limit(limit: int | None) -> int | None:
    """``limit`` checked where it enters (None: no limit): a whole number of rows, at least 1."""
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or not 1 <= limit <= MAX_ROWS
    ):
        raise StoreError(f"the row limit must be a whole number from 1 to {MAX_ROWS}, not {_shown(limit)}")
    return None if limit is None else int(limit)


def _shown(value: object) -> str:
    try:
        return shorten(str(value))
    except ValueError:  # Python writes no int of over 4,300 digits
        return "a number that long"


def stream_rows(fetch: Callable[[], list[tuple]]) -> Iterator[tuple]:
    """Rows, ``FETCH_ROWS`` at a time; a signal that came meanwhile is raised between fetches."""
    while True:
        rows = fetch()
        for row in rows:
            yield tuple(plain(value) for value in row)
        signum = pending()
        if signum is not None:
            raise_for(signum)
        if len(rows) < FETCH_ROWS:
            return


def past_limit(timeout_s: float) -> str:
    return f"the query ran past its time limit of {timeout_s:g} s (--timeout)"
