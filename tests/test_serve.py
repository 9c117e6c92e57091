"""`tracker serve` over HTTP, as a browser or a script reaches it, on SQLite and PostgreSQL: every
page answers with the store's own numbers (the ones `tracker show`, `compare`, `sql` and `export`
print), and hostile requests (path traversal, huge or malformed parameters, the SQL probe's attacks
through the box, writes) are refused in one line and change nothing in the store."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from served import serving, three_runs

from tracker.store import layer_rows, open_store, run_sql


@pytest.fixture
def served(db):
    three_runs(db)
    with serving(db, os.environ.get("TRACKER_READER_URL")) as url:
        yield db, url


def get(url: str, path: str, method: str = "GET", body: str | None = None) -> tuple[int, str, dict]:
    """One request with the path sent as written (no client normalises it)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request(method, path, body=body)
    answer = conn.getresponse()
    text = answer.read().decode("utf-8", "replace")
    conn.close()
    return answer.status, text, dict(answer.getheaders())


def figure(page: str, name: str) -> dict:
    found = re.search(rf"id=\"{name}\" class=\"plot\" data-figure='([^']*)'", page)
    assert found, name
    return json.loads(
        found.group(1)
        .replace("&#34;", '"')
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
    )


def counts(db: str) -> tuple:
    store = open_store(db, write=False)
    return tuple(run_sql(store, f"SELECT COUNT(*) FROM {table}")[1][0][0] for table in ("run", "launch", "metric"))


def test_the_runs_page_lists_every_run_and_links_it(served):
    db, url = served
    status, page, _ = get(url, "/")
    assert status == 200 and all(f'href="/runs/{n}"' in page for n in (1, 2, 3))


def test_a_runs_page_holds_its_roofline_and_its_layer_phases_with_units(served):
    db, url = served
    status, page, _ = get(url, "/runs/1")
    assert status == 200
    points = figure(page, "roofline")["data"]
    labels = [text for trace in points for text in trace["text"]]
    links = [link for trace in points for link in trace["customdata"]]
    assert {trace["name"] for trace in points} >= {"DRAM", "L2"} and labels and len(labels) == len(links)
    assert any(label.startswith("conv2 fwd: ") for label in labels) and "/runs/1/conv2/fwd" in links
    for header in ("median (time)", "predicted (time)", "intensity (FLOP/B)"):
        assert f">{header}</th>" in page
    for row in layer_rows(open_store(db, write=False), 1):
        assert f'href="/runs/1/{quote(row["layer"])}/{row["phase"]}"' in page
    for title in ("Stalls: the two dominant reasons", "Cache hit rates", "Traffic per memory level"):
        assert title in page


def test_a_layer_phase_page_lists_its_launches_with_every_counter(served):
    db, url = served
    status, page, _ = get(url, "/runs/1/conv2/bwd_weight")
    store = open_store(db, write=False)
    joined = "launch k JOIN layer l ON l.run_id = k.run_id AND l.layer_id = k.layer_id"
    _, rows = run_sql(
        store, f"SELECT COUNT(*) FROM {joined} WHERE k.run_id = 1 AND l.name = 'conv2' AND k.phase = 'bwd_weight'"
    )
    assert status == 200 and page.count("<tr>") - 1 == rows[0][0] > 0
    assert page.count("<th ") > 60  # every counter of the catalog ncu stored


def test_two_runs_side_by_side_as_compare_gives_them(served, runner):
    from tracker.cli import cli

    db, url = served
    status, page, _ = get(url, "/compare?a=1&b=2")
    done = runner.invoke(cli, ["compare", "1", "2", "--db", db, "--format", "json"])
    assert status == 200 and done.exit_code == 0
    assert page.count("<tr>") - 1 == len(json.loads(done.stdout))


def test_the_sql_box_answers_through_tracker_sqls_guard(served):
    db, url = served
    status, page, _ = get(url, "/sql?q=" + quote("SELECT COUNT(*) AS n FROM launch WHERE run_id = 1"))
    assert status == 200 and 'data-sort="57"' in page


def test_the_timeline_download_is_the_exporters(served, runner, tmp_path):
    from tracker.cli import cli

    db, url = served
    status, body, headers = get(url, "/runs/3/timeline.json")
    out = tmp_path / "run-3.json"
    assert runner.invoke(cli, ["export", "3", "--format", "chrome", "--out", str(out), "--db", db]).exit_code == 0
    assert status == 200 and json.loads(body) == json.loads(out.read_text())
    assert 'filename="run-3.json"' in headers.get("content-disposition", "")


def test_the_history_page_draws_a_figure_over_runs(served):
    _, url = served
    status, page, _ = get(url, "/history?network=alexnet&batch=16")
    assert status == 200 and len(figure(page, "history")["data"][0]["y"]) == 2


HOSTILE = [
    ("/static/../../../etc/passwd", 404),
    ("/static/%2e%2e%2f%2e%2e%2fserve%2fapp.py", 404),
    ("/static/..%2fapp.py", 404),
    ("/runs/1/..%2f..%2f..%2fetc/passwd", 404),
    ("/runs/" + "9" * 5000, 400),
    ("/runs/-1", 400),
    ("/runs/1e9", 400),
    ("/runs/99", 404),
    ("/compare?a=1&b=%27%20OR%201=1", 400),
    ("/compare?a=" + "1" * 100 + "&b=2", 400),
    ("/history?network=alexnet&batch=" + "9" * 50, 400),
    ("/sql?q=" + "x" * 200_000, 400),
]
SQL_ATTACKS = [
    "DELETE FROM run",
    "DROP TABLE launch",
    "UPDATE run SET status = 'failed'",
    "SELECT 1; DELETE FROM run",
    "ATTACH DATABASE '/tmp/x.db' AS x",
    "PRAGMA writable_schema = 1",
    "SELECT load_extension('/tmp/x')",
    "WITH d AS (DELETE FROM run RETURNING id) SELECT * FROM d",
]


def test_hostile_requests_are_refused_in_one_line_and_change_nothing(served):
    db, url = served
    before = counts(db)
    digest = hashlib.sha256(Path(db).read_bytes()).hexdigest() if "://" not in db else None
    for path, expected in HOSTILE:
        status, body, _ = get(url, path)
        assert status == expected, (path[:80], status, body[:200])
        assert "root:" not in body and "create_app" not in body
    for statement in SQL_ATTACKS:
        status, page, _ = get(url, "/sql?q=" + quote(statement))
        errors = re.findall(r'<p class="error">([^<]*)</p>', page)
        assert status == 400 and len(errors) == 1 and "\n" not in errors[0], (statement, errors)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, body, _ = get(url, "/sql?q=SELECT%201", method=method, body="q=DELETE FROM run")
        assert status == 405 and len(body.strip().splitlines()) <= 1, (method, body)
    assert counts(db) == before
    if digest is not None:
        assert hashlib.sha256(Path(db).read_bytes()).hexdigest() == digest


def test_serve_warns_when_it_listens_beyond_loopback(runner, monkeypatch, tmp_path):
    """--host other than loopback is said on stderr before the server starts (its run faked)."""
    from tracker.cli import cli

    three_runs(str(tmp_path / "t.db"))
    started = []
    monkeypatch.setattr("uvicorn.Server.run", lambda server: started.append(server.config))
    done = runner.invoke(cli, ["serve", "--db", str(tmp_path / "t.db"), "--host", "0.0.0.0", "--port", "9"])
    assert done.exit_code == 0 and "warning: listening on 0.0.0.0" in done.stderr
    assert [(c.host, c.port, c.h11_max_incomplete_event_size) for c in started] == [("0.0.0.0", 9, 1 << 20)]
    quiet = runner.invoke(cli, ["serve", "--db", str(tmp_path / "t.db")])
    assert "warning" not in quiet.stderr and started[-1].host == "127.0.0.1"
