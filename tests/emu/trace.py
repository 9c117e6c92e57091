"""What a GPU's memory system would make of a kernel's accesses, from the emulation's trace
(``Emulator(trace=True)``, emu_trace.h): the 32 lanes of each warp-wide access gathered, then the
32-byte sectors a global access touches against the bytes it asks for, and the shared-memory
wavefronts an access takes against the one it would take without bank conflicts.

A warp-wide access is the k-th execution of one load or store instruction by each lane of a warp
(lanes run in lock step on a GPU; the emulation runs each thread to its next barrier, so the k-th
execution of an instruction by every lane is the same warp instruction where the code does not
diverge). A shared access is served in phases: a 4-byte access by all 32 lanes at once, 8 bytes by
half warps, 16 bytes by quarter warps; each phase takes as many wavefronts as the most distinct
4-byte words any one of the 32 banks holds (lanes reading one word share it: a broadcast).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

RECORD = np.dtype(
    [("address", "<u8"), ("instruction", "<u8"), ("block", "<u4"), ("thread", "<u2"), ("bytes", "u1"), ("kind", "u1")]
)
SECTOR, BANKS, WORD = 32, 32, 4
DYNAMIC_SHARED = 256 * 1024  # cuda_emu.h's emu_dynamic_shared


@dataclass(frozen=True)
class Trace:
    """One launch's accesses: ``records`` (RECORD), each with its space ('global': an argument
    array; 'constant'; 'shared': everything else a kernel thread touches off its stack)."""

    kernel: str
    grid: tuple
    block: tuple
    records: np.ndarray
    space: np.ndarray  # one of SPACES per record

    @classmethod
    def read(cls, lib: ctypes.CDLL, kernel: str, grid: tuple, block: tuple, args: tuple) -> Trace:
        lib.emu_trace_records.restype = ctypes.c_void_p
        lib.emu_trace_recorded.restype = lib.emu_trace_lost.restype = ctypes.c_uint64
        if lib.emu_trace_lost():
            raise RuntimeError(f"{kernel}: the trace outgrew its buffer; trace a smaller case or fewer kernels")
        count = lib.emu_trace_recorded()
        raw = (ctypes.c_char * (count * RECORD.itemsize)).from_address(lib.emu_trace_records()) if count else b""
        records = np.frombuffer(bytes(raw), RECORD)
        arrays = [a._host for a in args if hasattr(a, "_host")]
        inside = np.zeros(len(records), bool)
        for host in arrays:
            lo = host.ctypes.data
            inside |= (records["address"] >= lo) & (records["address"] < lo + host.nbytes)
        space = np.where(inside, "global", np.where(records["kind"] & 2, "constant", "shared"))
        return cls(kernel, tuple(grid), tuple(block), records, space)

    def of(self, space: str, store: bool | None = None) -> np.ndarray:
        """The records in ``space``, loads or stores alone where ``store`` says."""
        keep = self.space == space
        if store is not None:
            keep &= (self.records["kind"] & 1).astype(bool) == store
        return self.records[keep]


def warp_accesses(records: np.ndarray) -> np.ndarray:
    """Each record's warp-wide access: an id shared by the lanes of one warp executing one
    instruction for the same time (block, warp, instruction, occurrence)."""
    if len(records) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((np.arange(len(records)), records["instruction"], records["thread"], records["block"]))
    r = records[order]
    same = np.r_[False, (r["block"][1:] == r["block"][:-1]) & (r["thread"][1:] == r["thread"][:-1])]
    same &= np.r_[False, r["instruction"][1:] == r["instruction"][:-1]]
    starts = np.flatnonzero(~same)
    occurrence = np.arange(len(r)) - np.repeat(starts, np.diff(np.r_[starts, len(r)]))
    keys = np.stack([r["block"].astype(np.int64), r["thread"] // 32, r["instruction"].astype(np.int64), occurrence], 1)
    _, ids = np.unique(keys, axis=0, return_inverse=True)
    found = np.empty(len(records), np.int64)
    found[order] = ids.ravel()
    return found


@dataclass(frozen=True)
class Sectors:
    requests: int  # warp-wide accesses
    sectors: int  # 32-byte sectors they touch
    wanted: int  # distinct bytes they ask for

    @property
    def use(self) -> float:
        """The share of each touched sector's bytes the warp asked for (1.0: fully coalesced)."""
        return self.wanted / (self.sectors * SECTOR) if self.sectors else 1.0


def sectors(records: np.ndarray) -> Sectors:
    """The 32-byte sectors global (or any) accesses touch, warp-wide access by warp-wide access."""
    ids = warp_accesses(records)
    first = records["address"] // SECTOR
    last = (records["address"] + records["bytes"] - 1) // SECTOR
    touched = np.unique(np.concatenate([np.stack([ids, first], 1), np.stack([ids, last], 1)]), axis=0)
    wanted = np.unique(np.stack([ids, records["address"].astype(np.int64), records["bytes"]], 1), axis=0)
    return Sectors(int(len(np.unique(ids))), len(touched), int(wanted[:, 2].sum()))


@dataclass(frozen=True)
class Wavefronts:
    requests: int
    wavefronts: int  # what the accesses take
    ideal: int  # what they would take without bank conflicts (one a phase)

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal


def wavefronts(records: np.ndarray) -> Wavefronts:
    """Shared-memory wavefronts, access by access: each phase's lanes take as many as the most
    distinct words one bank holds among them."""
    ids = warp_accesses(records)
    size = np.maximum(records["bytes"].astype(np.int64), WORD)
    lanes_a_phase = 32 // (size // WORD)  # 32, 16 or 8
    phase = (records["thread"].astype(np.int64) % 32) // lanes_a_phase
    per_record = size // WORD
    rows = np.repeat(np.arange(len(records)), per_record)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(per_record) - per_record, per_record)
    word = records["address"][rows].astype(np.int64) // WORD + offset
    words = np.unique(np.stack([ids[rows], phase[rows], word % BANKS, word], 1), axis=0)
    per_bank = np.unique(words[:, :3], axis=0, return_counts=True)
    phases, deepest = _max_by(per_bank[0][:, :2], per_bank[1])
    return Wavefronts(int(len(np.unique(ids))), int(deepest.sum()), len(phases))


def _max_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest value of each distinct key (rows of ``keys``)."""
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    most = np.zeros(len(unique), values.dtype)
    np.maximum.at(most, inverse.ravel(), values)
    return unique, most


def by_instruction(records: np.ndarray, measure: Any) -> dict[int, Any]:
    """``measure`` (sectors or wavefronts) of each instruction's accesses on its own."""
    return {int(i): measure(records[records["instruction"] == i]) for i in np.unique(records["instruction"])}
