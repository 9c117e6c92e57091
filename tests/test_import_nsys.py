"""`tracker import` of an Nsight Systems SQLite export: the public pipit exports (tests/data/public/
SOURCES.md, nsys 2022.2 and 2024.5), each stored launch checked against the export's own rows read
here by plain SQL, their NVTX ranges as layers, and hostile files refused in one line."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from timelines import check, exported

from tracker.cli import cli
from tracker.store import find_run, open_store, run_dict, run_sql

PUBLIC = Path(__file__).parent / "data" / "public"
SAXPY = PUBLIC / "nsys-saxpy-mpi-a100-2022.2.sqlite.gz"  # 5 saxpy kernels in NVTX ranges, and copies
CLOVER = PUBLIC / "nsys-cloverleaf-a100-2024.5.sqlite.gz"  # 1,312 kernels and 279 copies, no NVTX


def unpacked(packed: Path, tmp_path: Path) -> Path:
    path = tmp_path / packed.name.removesuffix(".gz")
    path.write_bytes(gzip.decompress(packed.read_bytes()))
    return path


def imported(runner, tmp_path: Path, path: Path, *args: str) -> tuple[str, int]:
    db = str(tmp_path / "t.db")
    done = runner.invoke(cli, ["import", str(path), "--db", db, "--format", "json", *args])
    assert done.exit_code == 0, done.output
    return db, json.loads(done.stdout)[0]["run_id"]


def export_rows(path: Path) -> list[tuple]:
    """(name, start, end) of every kernel, copy and fill, in the order of the runtime call that launched it."""
    with sqlite3.connect(path) as conn:
        first_call = "(SELECT MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = w.correlationId)"
        rows = conn.execute(
            f"SELECT s.value, w.start, w.end, {first_call}, w.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL w "
            "JOIN StringIds s ON s.id = w.demangledName "
            f"UNION ALL SELECT 'copy', w.start, w.end, {first_call}, w.correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY w"
        ).fetchall()
    return [(name, start, end) for name, start, end, *_ in sorted(rows, key=lambda r: (r[3], r[4]))]


@pytest.mark.parametrize("packed", [SAXPY, CLOVER], ids=["saxpy-2022.2", "cloverleaf-2024.5"])
def test_every_kernel_and_copy_is_a_launch_with_the_exports_own_times(runner, tmp_path, packed):
    path = unpacked(packed, tmp_path)
    db, run_id = imported(runner, tmp_path, path)
    expected = export_rows(path)
    origin = min(start for _, start, _ in expected)
    _, stored = run_sql(
        open_store(db, write=False),
        f"SELECT kernel_name, start_ns, time_ms FROM launch WHERE run_id = {run_id} ORDER BY invocation",
    )
    assert len(stored) == len(expected) > 0
    for (name, start_ns, ms), (source, start, end) in zip(stored, expected):
        assert start_ns == start - origin and ms == pytest.approx((end - start) / 1e6, abs=1e-12)
        assert name == source or (source == "copy" and name.startswith("Memcpy "))
    run = run_dict(find_run(open_store(db, write=False), run_id))
    assert (run["implementation"], run["backend"], run["library"]["format"]) == ("imported", "events", "nsys-sqlite")
    assert run["compute_capability"] == "8.0" and run["sm_count"] == 108


def test_nvtx_ranges_are_layers_and_each_instance_an_iteration(runner, tmp_path):
    """Each of the five saxpy kernels ran inside its own NVTX range 'saxpy': one layer, five iterations;
    the copies outside every range are layers named by what they copied."""
    path = unpacked(SAXPY, tmp_path)
    db, run_id = imported(runner, tmp_path, path)
    store = open_store(db, write=False)
    _, rows = run_sql(
        store,
        f"SELECT l.name, k.repeat, k.kernel_name FROM launch k JOIN layer l ON l.run_id = k.run_id "
        f"AND l.layer_id = k.layer_id WHERE k.run_id = {run_id} AND l.name = 'saxpy' ORDER BY k.invocation",
    )
    assert [(name, repeat) for name, repeat, _ in rows] == [("saxpy", r) for r in range(5)]
    assert {kernel for *_, kernel in rows} == {"saxpy(double *, double *, double *, double, int)"}
    _, layers = run_sql(store, f"SELECT name FROM layer WHERE run_id = {run_id} ORDER BY layer_id")
    assert [name for (name,) in layers] == ["Memcpy HtoD", "saxpy", "Memcpy DtoH"]
    run = run_dict(find_run(store, run_id))
    assert run["device_name"] == "NVIDIA A100-SXM4-40GB" and run["collector_version"].startswith(
        "Nsight Systems 2022.2"
    )


def test_an_imported_export_reads_back_from_its_timeline_and_shows_its_idle(runner, tmp_path):
    path = unpacked(SAXPY, tmp_path)
    db, run_id = imported(runner, tmp_path, path)
    found = exported(runner, db, str(run_id), "chrome", tmp_path)
    check(found[1], open_store(db, write=False), run_id)
    shown = runner.invoke(cli, ["show", str(run_id), "--db", db])
    assert shown.exit_code == 0 and "gpu_idle:" in shown.output and "median of 5" in shown.output


def test_the_export_is_only_read(runner, tmp_path):
    path = unpacked(SAXPY, tmp_path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    imported(runner, tmp_path, path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, "t.db"]  # no journal left beside it


def hostile(tmp_path: Path) -> list[tuple[Path, str]]:
    good = unpacked(SAXPY, tmp_path)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE test (a)")
    view = tmp_path / "view.sqlite"  # a view named as the kernel table is no table of an export
    with sqlite3.connect(view) as conn:
        conn.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT 1 AS start")
    empty = tmp_path / "empty.sqlite"
    shutil.copyfile(good, empty)
    with sqlite3.connect(empty) as conn:
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET")
    two = tmp_path / "two-gpus.sqlite"
    shutil.copyfile(good, two)
    with sqlite3.connect(two) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 WHERE correlationId = 140")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(good.read_bytes()[:50_000])
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 2\x00" + b"\x00" * 5000)
    return [
        (other, "holds no CUDA kernel activity"),
        (view, "holds no CUDA kernel activity"),
        (empty, "holds no kernel, copy or fill"),
        (two, "holds the work of 2 GPUs"),
        (truncated, "cannot read"),
        (junk, "cannot read"),
    ]


def test_a_file_that_is_no_export_is_refused_in_one_line_and_stores_nothing(runner, tmp_path):
    db = tmp_path / "store" / "t.db"
    db.parent.mkdir()
    for path, message in hostile(tmp_path):
        done = runner.invoke(cli, ["import", str(path), "--db", str(db)])
        assert done.exit_code == 1 and message in done.output, (path.name, done.output)
        assert len(done.output.strip().splitlines()) == 1 and not db.exists(), path.name
