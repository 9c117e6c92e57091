"""`tracker sql` on SQLite: one function call that builds a huge value or runs for
minutes, Ctrl-C and SIGTERM during such a call, and refusals that name what they refused."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tracker.errors import StoreError
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, run_sql
from tracker.store.sql import FETCH_BYTES, FETCH_ROWS, SQLITE_MAX_LENGTH
from tracker.store.sql.sqlite import next_batch

PROBE = "SELECT instr(printf('%.*c', 100000000, 'a'), 'b')"  # the probe's 100 MB string: 193 s, signals ignored


def one_call(m: int) -> str:
    """One instr() call of about m * m byte comparisons (m needle bytes at each of m places), under
    the length cap: m = 4,000,000 runs for minutes, m = 400,000 for seconds, inside SQLite's C."""
    return f"SELECT instr(printf('%.*c', {2 * m}, 'a'), printf('%.*c', {m}, 'a') || 'b')"


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "trace.db")
    profile(path, build("alexnet"), 4, backend="model")
    return path


def tracker_sql(db: str, statement: str, *args: str) -> subprocess.Popen:
    """`tracker sql` as started from a terminal (Ctrl-C delivered, not ignored as in a background job)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tracker", "sql", statement, "--db", db, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def finished(process: subprocess.Popen, limit_s: float) -> tuple[str, str]:
    try:
        return process.communicate(timeout=limit_s)
    finally:
        process.kill()
        process.wait()


def test_the_probe_ends_at_once_its_string_capped(db):
    """SQLite's printf() gives NULL for a value over the cap (other functions fail: below)."""
    started = time.monotonic()
    assert run_sql(open_store(db, write=False), PROBE, timeout_s=3)[1] == [(None,)]
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    "statement",
    [
        f"SELECT zeroblob({SQLITE_MAX_LENGTH + 1})",
        f"SELECT length(randomblob({SQLITE_MAX_LENGTH + 1}))",
        f"SELECT length(replace(printf('%.*c', {SQLITE_MAX_LENGTH // 2 + 1}, 'a'), 'a', 'bb'))",
        "WITH RECURSIVE c(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM c) SELECT length(x) FROM c",
    ],
)
def test_a_value_over_the_length_cap_is_refused_in_one_line(db, statement):
    with pytest.raises(StoreError, match=r"^refused: the query builds a value over 16 MiB, .*SQLITE_MAX_LENGTH\)$"):
        run_sql(open_store(db, write=False), statement)
    assert run_sql(open_store(db, write=False), f"SELECT length(zeroblob({SQLITE_MAX_LENGTH}))")[1] == [
        (SQLITE_MAX_LENGTH,)
    ]


def test_the_time_limit_ends_the_wait_inside_one_long_call(db):
    """The library returns at the limit; the call goes on in its thread until it returns."""
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"^the query ran past its time limit of 0.5 s \(--timeout\)$"):
        run_sql(open_store(db, write=False), one_call(400_000), timeout_s=0.5)
    assert time.monotonic() - started < 3


@pytest.mark.slow
def test_the_cli_ends_at_its_time_limit_inside_a_call_of_minutes(db):
    started = time.monotonic()
    process = tracker_sql(db, one_call(4_000_000), "--timeout", "3")
    stdout, stderr = finished(process, 60)
    assert time.monotonic() - started < 15
    assert process.returncode == 1 and stdout == ""
    assert stderr.splitlines() == ["Error: the query ran past its time limit of 3 s (--timeout)"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_ends_the_cli_inside_a_call_of_minutes(db, signum):
    process = tracker_sql(db, one_call(4_000_000), "--timeout", "600")
    time.sleep(4)  # started (the interpreter and tracker's imports take a second or two), and inside instr()
    assert process.poll() is None
    process.send_signal(signum)
    sent = time.monotonic()
    _, stderr = finished(process, 60)
    assert time.monotonic() - sent < 3
    assert process.returncode == 130 and stderr.strip().splitlines() == ["Error: interrupted"]


@pytest.mark.parametrize(
    "statement, action",
    [
        ("DROP TABLE run", "DROP TABLE"),
        ("DROP VIEW layer_phase", "DROP VIEW"),
        ("CREATE TABLE t (x INTEGER)", "CREATE TABLE"),
        ("CREATE TEMP TABLE t (x INTEGER)", "CREATE TEMP TABLE"),
        ("CREATE INDEX i ON run (batch)", "CREATE INDEX"),
        ("CREATE VIEW v AS SELECT 1", "CREATE VIEW"),
        ("CREATE TRIGGER t AFTER INSERT ON run BEGIN SELECT 1; END", "CREATE TRIGGER"),
        ("INSERT INTO metric (run_id, invocation, name, value) VALUES (1, 0, 'x', 1)", "INSERT"),
        ("UPDATE run SET batch = 1", "UPDATE"),
        ("DELETE FROM run", "DELETE"),
        ("ALTER TABLE run ADD COLUMN z", "ALTER TABLE"),
        ("ANALYZE", "ANALYZE"),
        ("REINDEX", "REINDEX"),
        ("ATTACH DATABASE 'other.db' AS other", "ATTACH"),
        ("DETACH other", "DETACH"),
        ("VACUUM", "VACUUM"),
        ("VACUUM INTO 'copy.db'", "VACUUM"),
        ("BEGIN", "TRANSACTION"),
        ("SAVEPOINT s", "SAVEPOINT"),
        ("PRAGMA query_only = 0", "PRAGMA query_only = 0"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode = DELETE"),
        ("PRAGMA writable_schema = ON", "PRAGMA writable_schema = ON"),
        ("SELECT load_extension('x')", "load_extension()"),
    ],
)
def test_a_refusal_names_the_action_refused(db, tmp_path, monkeypatch, statement, action):
    monkeypatch.chdir(tmp_path)
    before = {p.name for p in tmp_path.iterdir()}
    with pytest.raises(StoreError) as err:
        run_sql(open_store(db, write=False), statement)
    assert str(err.value) == f"refused: tracker sql is read-only and runs queries, not {action}"
    assert {p.name for p in tmp_path.iterdir()} == before


def test_a_batch_of_rows_is_bounded_in_bytes():
    """Rows of 1 MiB each: a batch ends once it holds FETCH_BYTES, long before FETCH_ROWS."""
    conn = sqlite3.connect(":memory:")
    cursor = conn.execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100) SELECT x, zeroblob(1048576) FROM c"
    )
    sizes = [len(rows) for rows in iter(lambda: next_batch(cursor), [])]
    assert FETCH_BYTES // 2**20 < FETCH_ROWS
    assert sizes == [FETCH_BYTES // 2**20] * (100 // (FETCH_BYTES // 2**20)) + [100 % (FETCH_BYTES // 2**20)]
