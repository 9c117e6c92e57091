"""The files a SQLite store is: a damaged one read leaves nothing beside it, --db names a file
(not one of SQLite's URIs, not a dangling symbolic link), upgrade touches only a tracker store,
and export and report write only into a folder of their own. Each refusal is one line."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from tests.cli_errors import refused as refused_by
from tracker.cli import cli
from tracker.errors import StoreError
from tracker.store import open_store


def refused(result, *words) -> str:
    """Exit 1 (profile says first which backend it chose)."""
    return refused_by(result, *words, codes=(1,), before="backend: model")


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def store_file(tmp_path) -> Path:
    """A real, empty tracker store (WAL mode, as tracker makes them)."""
    path = tmp_path / "trace.db"
    open_store(str(path), write=True).dispose()
    assert listing(tmp_path) == ["trace.db"]
    return path


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _header(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(b"X" * 100 + data[100:])


def _page(path: Path) -> None:
    """The run table's root page overwritten: the file opens, reading runs fails."""
    with sqlite3.connect(path) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'run'").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * size : root * size] = b"\xff" * size
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncated, _header, _page], ids=["truncated", "header", "page"])
@pytest.mark.parametrize("args", [["runs"], ["sql", "SELECT * FROM run"], ["show", "1"]], ids=["runs", "sql", "show"])
def test_reading_a_damaged_store_leaves_nothing_beside_it(runner, store_file, damage, args):
    damage(store_file)
    before = store_file.read_bytes()
    refused(runner.invoke(cli, [*args, "--db", str(store_file)]))
    assert listing(store_file.parent) == ["trace.db"]  # no -wal, -shm or -journal
    assert store_file.read_bytes() == before


def test_reading_a_store_creates_no_file(runner, store_file):
    assert runner.invoke(cli, ["runs", "--db", str(store_file)]).exit_code == 0
    assert listing(store_file.parent) == ["trace.db"]
    refused(runner.invoke(cli, ["runs", "--db", str(store_file.parent / "none.db")]), "no trace database")
    assert listing(store_file.parent) == ["trace.db"]


@pytest.mark.parametrize(
    "db",
    [
        "file:trace.db?mode=ro",
        "FILE:trace.db",
        "sqlite:///file:trace.db",
        "sqlite:///trace.db?mode=ro",
        "sqlite:///t.db?mode=rwc&uri=true",
    ],
)
@pytest.mark.parametrize(
    "command",
    [["runs"], ["profile", "alexnet", "--batch", "1", "--backend", "model"], ["upgrade"]],
    ids=["read", "write", "upgrade"],
)
def test_db_takes_a_path_or_a_url_never_a_sqlite_uri(runner, tmp_path, monkeypatch, db, command):
    monkeypatch.chdir(tmp_path)
    refused(runner.invoke(cli, [*command, "--db", db]), "SQLite")
    assert listing(tmp_path) == []  # it once created files named 'file:trace.db?mode=ro'


def test_the_library_refuses_a_sqlite_uri_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="is a SQLite URI, not a path"):
        open_store("file:trace.db?mode=rwc", write=True)
    assert listing(tmp_path) == []


@pytest.mark.parametrize("url", ["sqlite:///{path}", "{path}"], ids=["url", "path"])
def test_the_urls_and_paths_accepted_before_still_are(runner, store_file, url):
    done = runner.invoke(cli, ["runs", "--db", url.format(path=store_file)])
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize("target", ["missing.db", "no/such/folder/x.db"])
@pytest.mark.parametrize(
    "command",
    [["runs"], ["profile", "alexnet", "--batch", "1", "--backend", "model"], ["upgrade"]],
    ids=["read", "write", "upgrade"],
)
def test_a_dangling_symlink_as_db_creates_nothing(runner, tmp_path, target, command):
    link = tmp_path / "link.db"
    link.symlink_to(target)
    refused(runner.invoke(cli, [*command, "--db", str(link)]), str(link))
    assert listing(tmp_path) == ["link.db"] and not os.path.exists(link)  # it once created the link's target


def test_a_symlink_to_a_store_is_read(runner, store_file):
    link = store_file.parent / "link.db"
    link.symlink_to(store_file)
    assert runner.invoke(cli, ["runs", "--db", str(link)]).exit_code == 0


@pytest.mark.parametrize("content", [b"", b"not a database\n"], ids=["empty", "text"])
def test_upgrade_refuses_a_file_that_is_not_a_store(runner, tmp_path, content):
    path = tmp_path / "x.db"
    path.write_bytes(content)
    refused(runner.invoke(cli, ["upgrade", "--db", str(path)]), str(path))
    assert path.read_bytes() == content and listing(tmp_path) == ["x.db"]  # it once wrote a store into it


def test_upgrade_refuses_a_foreign_sqlite_database_and_a_missing_one(runner, tmp_path):
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = foreign.read_bytes()
    refused(runner.invoke(cli, ["upgrade", "--db", str(foreign)]), "not a tracker trace database")
    assert foreign.read_bytes() == before
    refused(runner.invoke(cli, ["upgrade", "--db", f"sqlite:///{tmp_path}/new.db"]), "no trace database")
    assert listing(tmp_path) == ["app.db"]


def test_upgrade_keeps_a_store(runner, store_file):
    done = runner.invoke(cli, ["upgrade", "--db", str(store_file)])
    assert done.exit_code == 0 and "already this tracker's" in done.stdout


def test_the_library_opens_to_write_without_creating_when_told(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match="not a tracker trace database"):
        open_store(str(empty), write=True, create=False)
    assert empty.stat().st_size == 0


@pytest.fixture
def one_run(runner, tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(cli, ["profile", "alexnet", "--batch", "1", "--backend", "model", "--db", "trace.db"])
    assert done.exit_code == 0, done.output
    return tmp_path / "trace.db"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["export", "report"])
def test_export_and_report_refuse_a_folder_of_files_they_did_not_write(runner, one_run, command):
    folder = one_run.parent / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me\n")
    refused(
        runner.invoke(cli, [command, "1", "--db", str(one_run), "--out", str(folder)]),
        "files tracker did not write",
        "--force",
    )
    assert listing(folder) == ["notes.txt"]
    if os.geteuid() == 0:  # the probe, as root: 20 CSV files into /
        before = listing(Path("/"))
        refused(runner.invoke(cli, [command, "1", "--db", str(one_run), "--out", "/"]), "--force")
        assert listing(Path("/")) == before
    done = runner.invoke(cli, [command, "1", "--db", str(one_run), "--out", str(folder), "--force"])
    assert done.exit_code == 0, done.output
    assert (folder / "notes.txt").read_text() == "keep me\n"
