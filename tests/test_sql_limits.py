"""`tracker sql` holds its time limit and the client's memory whatever the query: a row too large
is refused before the client holds it, SQLite's memory in the process is capped, and PostgreSQL's
time limit is kept by the client when the server's own timer is late."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tracker.errors import StoreError
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, run_sql

PEAK_MIB = 512  # the most the client may hold under any attack below


@pytest.fixture
def store_db(db) -> str:
    profile(db, build("alexnet"), 4, backend="model")
    return db


def columns(expression: str, count: int) -> str:
    return ", ".join([expression] * count)


def peak(db: str, statement: str, *args: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident MiB) of `tracker sql` run in a child process."""
    done = subprocess.run(
        check=False,
        args=[
            sys.executable,
            "-c",
            f"""
import json, resource, subprocess, sys
out = subprocess.run([sys.executable, "-m", "tracker", "sql", {json.dumps(statement)}, "--db", {json.dumps(db)},
                      "--format", "csv", *{json.dumps(list(args))}], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                     text=True)
print(json.dumps([out.returncode, out.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024]))
""",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    code, stderr, mib = json.loads(done.stdout)
    return code, stderr, mib


SQLITE_ATTACKS = {
    "40 zeroblob columns": f"SELECT {columns('zeroblob(16000000)', 40)}",
    "20 randomblob columns": f"SELECT {columns('randomblob(16000000)', 20)}",
    "2 randomblob columns": f"SELECT {columns('randomblob(16000000)', 2)}",
    "printf columns": f"SELECT {columns(chr(39).join(['printf(', '%.*c', ', 16000000, ', 'a', ')']), 8)}",
    "recursive growth": "WITH RECURSIVE c(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM c) SELECT x FROM c",
    "group_concat": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000000) "
    "SELECT group_concat(x) FROM c",
    "rows of 1 MB": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) "
    "SELECT x, randomblob(1000000) FROM c",
    "JSON text": "SELECT '[' || replace(hex(zeroblob(5000000)), '00', '[],') || '[]]'",  # 20x its length decoded
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", SQLITE_ATTACKS)
def test_the_clients_memory_holds_under_every_sqlite_attack(tmp_path, attack):
    db = str(tmp_path / "trace.db")
    profile(db, build("alexnet"), 4, backend="model")
    code, stderr, mib = peak(db, SQLITE_ATTACKS[attack], "--timeout", "120")
    assert mib < PEAK_MIB, f"{attack}: {mib} MiB"
    assert code in (0, 1) and stderr.count("\n") <= 1 and "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["table", "json"])
@pytest.mark.parametrize("attack", ["rows of 1 MB", "JSON text"])
def test_the_clients_memory_holds_in_every_format(tmp_path, attack, fmt):
    """A table holds its rows to align them, and JSON output writes decoded JSON: neither may hold
    more than it shows (300 rows of 1 MB took 2.8 GB as a table, 15 MB of JSON text 1.1 GB)."""
    db = str(tmp_path / "trace.db")
    profile(db, build("alexnet"), 4, backend="model")
    code, stderr, mib = peak(db, SQLITE_ATTACKS[attack].replace("2000", "300"), "--format", fmt)
    assert mib < PEAK_MIB, f"{attack} as {fmt}: {mib} MiB"
    assert code == 0, stderr


@pytest.mark.parametrize(
    "statement, refusal",
    [
        (f"SELECT {columns('randomblob(16000000)', 20)}", r"the query holds over 64 MiB at once"),
        (f"SELECT {columns('zeroblob(16000000)', 40)}", r"the query holds over 64 MiB at once"),
        (f"SELECT {columns('randomblob(9000000)', 2)}", r"a row of the query holds 18,000,000 bytes, over the 16 MiB"),
    ],
)
def test_a_row_too_large_is_refused_in_one_line_on_sqlite(tmp_path, statement, refusal):
    db = str(tmp_path / "trace.db")
    profile(db, build("alexnet"), 4, backend="model")
    with pytest.raises(StoreError, match=rf"^refused: {refusal}") as err:
        run_sql(open_store(db, write=False), statement)
    assert "\n" not in str(err.value)
    _, rows = run_sql(open_store(db, write=False), f"SELECT {columns('randomblob(8000000)', 2)}")
    assert [len(value) for value in rows[0]] == [8_000_000, 8_000_000]  # 16 MB: just under the bound


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement",
    [
        "SELECT decode(repeat('00', (10000000 + random() * 0)::int), 'hex')",  # 10 MB stored, 20 MB as text
        "SELECT array_fill(pi(), ARRAY[(2000000 + random() * 0)::int])",  # 16 MB stored, 36 MB as text
    ],
)
def test_a_row_is_measured_as_the_client_receives_it(pg_url, statement):
    """The server counts a row's bytes as text, the form it sends, not as it stores them."""
    profile(pg_url, build("alexnet"), 4, backend="model")
    with pytest.raises(
        StoreError,
        match=r"^refused: 1,000 rows in a row hold [\d,]+ bytes on the server, over the "
        r"16 MiB tracker sql fetches at a time",
    ):
        run_sql(open_store(pg_url, write=False), statement, timeout_s=60)


POSTGRES_ATTACKS = {
    "repeat": "SELECT repeat('x', (300000000 + random() * 0)::int)",
    "bytea as text": "SELECT decode(repeat('00', (10000000 + random() * 0)::int), 'hex')",
    "float array": "SELECT array_fill(pi(), ARRAY[(2000000 + random() * 0)::int])",
    "huge numeric": "SELECT 1e131071::numeric FROM generate_series(1, 3000)",
    "string_agg": "SELECT string_agg(x::text, ',') FROM generate_series(1, 5000000) x",
    "many rows": "SELECT x, repeat('y', 100) FROM generate_series(1, 300000) x",
    "JSON text": "SELECT ('[' || repeat('[],', (5000000 + random() * 0)::int) || '[]]')::json",
}


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("attack", POSTGRES_ATTACKS)
def test_the_clients_memory_holds_under_every_postgresql_attack(pg_url, attack):
    profile(pg_url, build("alexnet"), 4, backend="model")
    code, stderr, mib = peak(pg_url, POSTGRES_ATTACKS[attack], "--timeout", "120")
    assert mib < PEAK_MIB, f"{attack}: {mib} MiB"
    assert code in (0, 1) and stderr.count("\n") <= 1 and "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.postgres
def test_the_time_limit_holds_while_the_server_plans_a_folded_constant(pg_url):
    """Planning repeat('x', 300000000) runs for seconds without the server looking at its timer,
    and each statement got the whole limit again: the query overran by as much again. Now the
    client cancels at the deadline, and leaves the connection if the server is late."""
    profile(pg_url, build("alexnet"), 4, backend="model")
    store = open_store(pg_url, write=False)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"^the query ran past its time limit of 3 s \(--timeout\)$"):
        run_sql(store, "SELECT repeat('x', 300000000)", timeout_s=3)
    assert time.monotonic() - started < 3 + 1
