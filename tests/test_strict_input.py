"""Whole numbers are digits only, on the command line and in the library: Python's int(), which
click's INT is, also takes '1_0', ' 8', '+1' and other scripts' digits. And every option that
names a file is checked whatever the backend."""

from __future__ import annotations

import os

import pytest

from tests.cli_errors import refused as refused_by
from tracker.cli import cli
from tracker.errors import TrackerError

NOT_DIGITS = ["1_0", " 8", "8 ", "+1", "-0", "0x8", "８", "1e1"]
PROC = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc, where root may create nothing")


def refused(result, *words) -> str:
    """Exit 1, or 2 for click's usage errors."""
    return refused_by(result, *words, codes=(1, 2))


@pytest.fixture
def store(tmp_path) -> str:
    from tracker.store import open_store

    path = str(tmp_path / "trace.db")
    open_store(path, write=True).dispose()
    return path


@pytest.mark.parametrize("value", NOT_DIGITS)
@pytest.mark.parametrize(
    "args",
    [
        ["model", "alexnet", "--device", "h100", "--batch", "{}"],
        ["networks", "unet", "--depth", "{}"],
        ["profile", "alexnet", "--backend", "model", "--repeat", "{}"],
        ["profile", "alexnet", "--backend", "model", "--warmup", "{}"],
        ["profile", "alexnet", "--backend", "model", "--counter-iterations", "{}"],
        ["experiment", "batch", "alexnet", "--backend", "model", "--batches", "{}"],
        ["experiment", "batch", "alexnet", "--backend", "model", "--batches", "16,{}"],
        ["experiment", "fusion", "unet", "--backend", "model", "--vary", "depth={}"],
        ["experiment", "fusion", "unet", "--backend", "model", "--vary", "depth=2,{}"],
        ["sql", "SELECT 1", "--limit", "{}"],
    ],
    ids=lambda a: a[0] + "-" + a[-2] if isinstance(a, list) else None,
)
def test_a_whole_number_is_digits_only(runner, tmp_path, monkeypatch, args, value):
    monkeypatch.chdir(tmp_path)
    refused(runner.invoke(cli, [a.replace("{}", value) for a in args]), "whole number")
    assert os.listdir(tmp_path) == []


def test_a_list_of_numbers_takes_no_spaces(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(runner.invoke(cli, ["experiment", "batch", "alexnet", "--backend", "model", "--batches", "1, 2"]), "' 2'")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", ["99999999999999999999", "9" * 5000])
def test_a_number_too_long_for_any_range_is_one_line(runner, value):
    refused(runner.invoke(cli, ["model", "alexnet", "--device", "h100", "--batch", value]))
    refused(
        runner.invoke(cli, ["experiment", "batch", "alexnet", "--backend", "model", "--batches", value]), "out of range"
    )


def test_digits_are_still_numbers(runner):
    done = runner.invoke(cli, ["model", "alexnet", "--device", "h100", "--batch", "016", "--format", "json"])
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize("ref", [" 1", "1 ", "+1", "1_0", "１"])
@pytest.mark.parametrize("command", ["show", "export", "experiments"])
def test_an_id_is_digits_only(runner, store, command, ref):
    refused(runner.invoke(cli, [command, ref, "--db", store]), "is not a")


def test_the_library_takes_ints_not_text_or_bools(store):
    from tracker.gpu.workload import Workload
    from tracker.model.roofline import check_batch
    from tracker.store import find_run, open_store

    for bad in ("8", True, 8.0, None):
        with pytest.raises(TrackerError, match="is not a whole number"):
            check_batch(bad)  # type: ignore[arg-type]
    assert check_batch(8) == 8
    for field in ("batch", "repeat", "warmup"):
        with pytest.raises(TrackerError, match=f"^{field}: .* is not a whole number"):
            Workload("alexnet", **{field: "2"})
    with pytest.raises(TrackerError, match="is out of range"):
        Workload("alexnet", batch=2**80)
    with pytest.raises(TrackerError, match="is not a run id"):
        find_run(open_store(store, write=False), " 1")


def test_the_library_axis_takes_digits_only():
    from tracker.nets import axis

    assert axis("depth=2,3") == ("depth", (2, 3))
    for bad in ("depth=2, 3", "depth=+2", "depth=2_0", "depth=²"):
        with pytest.raises(TrackerError, match="whole number"):
            axis(bad)


@PROC
@pytest.mark.parametrize(
    "args",
    [
        ["profile", "alexnet", "--backend", "model", "--ncu-report", "/proc/x/r.ncu-rep"],
        ["profile", "alexnet", "--backend", "model", "--ncu-report", "/"],
        ["experiment", "batch", "alexnet", "--backend", "model", "--batches", "1", "--logs", "/proc/x/logs"],
    ],
    ids=["ncu-report", "ncu-report-dir", "logs"],
)
def test_an_option_naming_a_file_is_checked_whatever_the_backend(runner, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    refused(runner.invoke(cli, args), args[-1])
    assert os.listdir(tmp_path) == []  # refused before the store was made


def test_a_writable_ncu_report_is_left_as_it_was(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(
        cli, ["profile", "alexnet", "--batch", "1", "--backend", "model", "--db", "t.db", "--ncu-report", "r.ncu-rep"]
    )
    assert done.exit_code == 0, done.output
    assert "--ncu-report ignored" in done.stdout and not (tmp_path / "r.ncu-rep").exists()
