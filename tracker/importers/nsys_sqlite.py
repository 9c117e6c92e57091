"""An Nsight Systems export (``nsys export --type sqlite``): the CUDA activity with its NVTX ranges.

Each kernel, copy and fill the GPU ran (``CUPTI_ACTIVITY_KIND_KERNEL``, ``_MEMCPY``, ``_MEMSET``) is
a launch, in the order the host called the runtime for it (``CUPTI_ACTIVITY_KIND_RUNTIME``, by
``correlationId``), with the device's own start and end in ns, grid, block, registers and shared
memory. Its ranges are the NVTX push/pop ranges (``NVTX_EVENTS``, event type 59) open on the
launching thread at that call, outermost first, as ncu's report gives them. Copies and fills are
named as the PyTorch profiler names them (``Memcpy HtoD (Pageable -> Device)``), so that every
reader counts them alike (``tracker.kernel_names.is_transfer``).

The file is opened read-only and only its tables are read, by fixed queries: a database that is
no export, or an export without CUDA activity, is refused in one line.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

from tracker.errors import TrackerError
from tracker.importers.base import Imported, ImportedLaunch

KERNELS, COPIES, FILLS = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
PUSH_POP = 59  # NVTX_EVENTS.eventType of a thread's push/pop range (NvtxPushPopRange)
# CUPTI's enums, as the export stores them (CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind)
COPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
MEMORY_KINDS = {
    1: "Pageable",
    2: "Pinned",
    3: "Device",
    4: "Array",
    5: "Managed",
    6: "Device Static",
    7: "Managed Static",
}
NAMED = "LEFT JOIN StringIds s ON s.id = w.{column}"


def read(path: Path) -> Imported:
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
            return _read(conn, path)
    except sqlite3.Error as exc:
        raise TrackerError(f"cannot read {path} as an Nsight Systems export: {exc}") from None


def _read(conn: sqlite3.Connection, path: Path) -> Imported:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if KERNELS not in tables:
        raise TrackerError(
            f"{path} holds no CUDA kernel activity: not an Nsight Systems export (nsys export --type sqlite), "
            "or one profiled without --trace cuda"
        )
    work = _work(conn, tables)
    if not work:
        raise TrackerError(f"{path} holds no kernel, copy or fill: its profile traced no CUDA work")
    devices = {row[1] for row in work}
    if len(devices) != 1:
        raise TrackerError(f"{path} holds the work of {len(devices)} GPUs: tracker stores one GPU's run a file")
    calls = _calls(conn, tables)
    ranges = _ranges(conn, tables)
    origin = min(row[2] for row in work)

    def called(row: tuple) -> tuple:
        call = calls.get(row[0])
        return (call[0] if call else row[2], row[0])

    opened = _opened(ranges, calls)
    launches = []
    for row in sorted(work, key=called):
        _, _, start, end, name, grid, block, registers, shared = row
        call = calls.get(row[0])
        around = opened.get(call, ()) if call else ()
        launches.append(
            ImportedLaunch(name, around, grid, block, registers, shared, (end - start) / 1e6, start_ns=start - origin)
        )
    device = _device(conn, tables, devices.pop())
    return Imported(
        str(path),
        "nsys-sqlite",
        "events",
        _tool(conn, tables),
        device.get("name"),
        None if device.get("major") is None else f"{device['major']}.{device['minor']}",
        device.get("sm_count"),
        {},
        launches,
    )


def _work(conn: sqlite3.Connection, tables: set[str]) -> list[tuple]:
    """(correlation, device, start, end, name, grid, block, registers, shared bytes) of every
    kernel, copy and fill."""
    rows = [
        (c, d, s, e, name or "?", (gx, gy, gz), (bx, by, bz), r, (ss or 0) + (ds or 0))
        for c, d, s, e, name, gx, gy, gz, bx, by, bz, r, ss, ds in conn.execute(
            f"SELECT w.correlationId, w.deviceId, w.start, w.end, COALESCE(s.value, CAST(w.demangledName AS TEXT)), "
            "w.gridX, w.gridY, w.gridZ, w.blockX, w.blockY, w.blockZ, w.registersPerThread, "
            f"w.staticSharedMemory, w.dynamicSharedMemory FROM {KERNELS} w {NAMED.format(column='demangledName')}"
        )
    ]
    zero = (0, 0, 0)
    if COPIES in tables:
        rows += [
            (c, d, s, e, f"Memcpy {COPY_KINDS.get(k, '?')} ({_memory(src)} -> {_memory(dst)})", zero, zero, None, 0)
            for c, d, s, e, k, src, dst in conn.execute(
                f"SELECT correlationId, deviceId, start, end, copyKind, srcKind, dstKind FROM {COPIES}"
            )
        ]
    if FILLS in tables:
        rows += [
            (c, d, s, e, f"Memset ({_memory(kind)})", zero, zero, None, 0)
            for c, d, s, e, kind in conn.execute(f"SELECT correlationId, deviceId, start, end, memKind FROM {FILLS}")
        ]
    return rows


def _memory(kind: int | None) -> str:
    return MEMORY_KINDS.get(kind or 0, "Unknown")


def _calls(conn: sqlite3.Connection, tables: set[str]) -> dict[int, tuple[int, int]]:
    """correlation -> (when the host called the runtime for it, on which thread): the first call."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return {}
    calls: dict[int, tuple[int, int]] = {}
    for correlation, start, thread in conn.execute(
        "SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start"
    ):
        calls.setdefault(correlation, (start, thread))
    return calls


def _ranges(conn: sqlite3.Connection, tables: set[str]) -> dict[int, list[tuple[int, int, str]]]:
    """Per thread, its push/pop ranges (start, end, name) in start order, the outer before the inner."""
    if "NVTX_EVENTS" not in tables:
        return {}
    found: defaultdict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for start, end, name, thread in conn.execute(
        "SELECT w.start, w.end, COALESCE(w.text, s.value), w.globalTid FROM NVTX_EVENTS w "
        f"{NAMED.format(column='textId')} WHERE w.eventType = ? AND w.end IS NOT NULL",
        (PUSH_POP,),
    ):
        found[thread].append((start, end, name or "?"))
    for spans in found.values():
        spans.sort(key=lambda span: (span[0], -span[1]))
    return found


def _opened(ranges: dict[int, list[tuple[int, int, str]]], calls: dict[int, tuple[int, int]]) -> dict[tuple, tuple]:
    """(time, thread) of each call -> the ranges open on that thread then, outermost first: one
    sweep a thread, its push/pop ranges nesting as a stack."""
    times: defaultdict[int, set[int]] = defaultdict(set)
    for at, thread in calls.values():
        times[thread].add(at)
    opened: dict[tuple, tuple] = {}
    for thread, spans in ranges.items():
        stack: list[tuple[int, int, str]] = []
        following = iter(spans)
        waiting = next(following, None)
        for at in sorted(times[thread]):
            while waiting is not None and waiting[0] <= at:
                while stack and stack[-1][1] < waiting[0]:
                    stack.pop()
                stack.append(waiting)
                waiting = next(following, None)
            opened[at, thread] = tuple(name for _, end, name in stack if end >= at)
    return opened


def _device(conn: sqlite3.Connection, tables: set[str], device: int) -> dict:
    if "TARGET_INFO_GPU" not in tables:
        return {}
    row = conn.execute(
        "SELECT name, smCount, computeMajor, computeMinor FROM TARGET_INFO_GPU WHERE id = ?", (device,)
    ).fetchone()
    return dict(zip(("name", "sm_count", "major", "minor"), row)) if row else {}


def _tool(conn: sqlite3.Connection, tables: set[str]) -> str:
    """'Nsight Systems 2024.5.1.113 (export schema 3.13.2)', from the export's own metadata."""
    table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
    meta = dict(conn.execute(f"SELECT name, value FROM {table}").fetchall()) if table else {}
    version, schema = meta.get("EXPORT_PRODUCT_VERSION", "?"), meta.get("EXPORT_SCHEMA_VERSION", "?")
    return f"Nsight Systems {version} (export schema {schema})"
