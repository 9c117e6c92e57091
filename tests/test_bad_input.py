"""Bad input, through the real CLI and the library alike: one `Error:` line on stderr, a non-zero
exit, no 'internal error', nothing written; an unwritable output refused before any work."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tracker.cli import cli
from tracker.errors import TrackerError, UnknownName

LONG = "a" * 300  # over the 255 bytes a file name may take
PROC = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc, where root may create nothing")


def refused(result, *words) -> str:
    """The one error line, after checking the command printed nothing else and wrote nothing."""
    assert result.exit_code != 0, result.output
    assert result.stdout == "", result.stdout[:500]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr[:2000]
    assert "internal error" not in lines[0] and "Traceback" not in result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def work(runner, tmp_path, monkeypatch) -> Path:
    """An empty current folder holding one model run in trace.db."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["profile", "alexnet", "--batch", "2", "--db", "trace.db"])
    assert result.exit_code == 0, result.output
    return tmp_path


# 1. Output paths that cannot be written: probed before any work, not asked of os.access (which
# says yes to root, /proc included).

@pytest.mark.parametrize("args, words", [
    (["report", "last", "--out", LONG], ["cannot write to", "File name too long"]),
    (["report", "last", "--out", f"{LONG}/sub"], ["File name too long"]),
    (["export", "last", "--out", LONG], ["cannot write to", "File name too long"]),
    (["model", "alexnet", "--device", "h100", "--plot", f"{LONG}.png"], ["cannot write", "File name too long"]),
    pytest.param(["export", "last", "--out", "/proc/x"], ["cannot write to /proc/x"], marks=PROC),
    pytest.param(["report", "last", "--out", "/proc/nope"], ["cannot write to /proc/nope"], marks=PROC),
    pytest.param(["report", "last", "--out", "/proc/nope/deeper"], ["cannot write to /proc/nope/deeper"],
                 marks=PROC),
    pytest.param(["model", "alexnet", "--device", "h100", "--plot", "/proc/x.png"], ["cannot write /proc/x.png"],
                 marks=PROC),
])
def test_an_unwritable_output_is_refused_before_any_work(runner, work, args, words):
    before = snapshot(work)
    line = refused(runner.invoke(cli, args + (["--db", "trace.db"] if args[0] != "model" else [])), *words)
    assert len(line) < 400  # the 300-character name is not echoed whole
    assert snapshot(work) == before


def test_an_existing_plot_file_is_probed_and_left_as_it_was(runner, work):
    plot = work / "roofline.png"
    plot.write_bytes(b"an older plot")
    mtime = plot.stat().st_mtime_ns
    from tracker.paths import check_file

    assert check_file(plot, (".png",)) == plot
    assert plot.read_bytes() == b"an older plot" and plot.stat().st_mtime_ns == mtime


@PROC
@pytest.mark.parametrize("command", ["report", "export"])
def test_an_os_error_the_checks_missed_is_one_line(runner, work, monkeypatch, command):
    """The safety net in TrackerGroup: with the checks switched off the write itself fails, and
    says so in one line naming the file, not as an internal error."""
    for module in ("tracker.paths", "tracker.report", "tracker.export"):
        monkeypatch.setattr(f"{module}.check_dir", lambda out: Path(out))
    result = runner.invoke(cli, [command, "last", "--db", "trace.db", "--out", "/proc/nope"])
    refused(result, "cannot use /proc/nope", "No such file or directory")


# 2. An unknown name is echoed shortened, and looking for a close one costs nothing on huge input.

HUGE = "x" * 100_000


@pytest.mark.parametrize("args, words", [
    (["model", HUGE], ["unknown network"]),
    (["devices", HUGE], ["unknown device"]),
    (["model", "alexnet", "--device", HUGE], ["unknown device"]),
    (["model", "alexnet", "--format", HUGE], ["--format"]),
    (["model", "unet2d", "--input-size", HUGE], ["input size"]),
    (["experiment", HUGE, "alexnet"], ["is not one of"]),
])
def test_a_huge_unknown_name_is_echoed_shortened(runner, args, words):
    line = refused(runner.invoke(cli, args), *words)
    assert "x" * 40 + "…'" in line and "x" * 41 not in line and len(line) < 400


def test_did_you_mean_does_not_search_for_a_name_no_known_one_is_close_to(monkeypatch):
    import difflib

    from tracker.errors import did_you_mean, unknown

    assert did_you_mean("alexnett", ["alexnet", "unet2d"]) == " (did you mean alexnet?)"
    assert did_you_mean("a" * 18, ["a" * 8]) == " (did you mean aaaaaaaa?)"  # ratio 0.615: still close
    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: pytest.fail("searched a hopeless name"))
    assert did_you_mean("x" * 10_000_000, ["alexnet", "unet2d"]) == ""
    assert str(unknown("network", "y" * 10_000_000, ["alexnet"])) == f"unknown network '{'y' * 40}…'; known: alexnet"


# 3. Accepted before, and wrong: the same op twice, an empty device name, an empty output path.

@pytest.mark.parametrize("args, words", [
    (["profile", "alexnet", "--variant", "conv=fused,conv=shared", "--backend", "model"], ["op conv twice"]),
    (["profile", "alexnet", "--variant", "conv=fused,lrn=shared,conv=fused", "--backend", "model"], ["op conv twice"]),
    (["profile", "alexnet", "--device", "", "--backend", "model"], ["device name is empty"]),
    (["profile", "alexnet", "--staged", "--l1-bypass", "--backend", "model"], ["--staged", "staged already"]),
    (["profile", "alexnet", "--staged", "--impl", "torch", "--backend", "model"], ["--staged", "--impl torch"]),
    (["model", "alexnet", "--device", ""], ["device name is empty"]),
    (["model", "alexnet", "--device", "  "], ["device name is empty"]),
    (["devices", ""], ["device name is empty"]),
    (["metrics", ""], ["unknown metric ''"]),
    (["experiment", "batch", "alexnet", "--backend", "model", "--device", ""], ["device name is empty"]),
    (["export", "last", "--out", ""], ["output path is empty"]),
    (["report", "last", "--out", ""], ["output path is empty"]),
    (["model", "alexnet", "--device", "h100", "--plot", ""], ["output path is empty"]),
])
def test_empty_and_doubled_values_are_refused(runner, work, args, words):
    before = snapshot(work)
    refused(runner.invoke(cli, args + (["--db", "trace.db"] if args[0] in ("profile", "experiment", "export", "report")
                                       else [])), *words)
    assert snapshot(work) == before  # export --out "" wrote 20 files into the current folder


def test_the_library_refuses_them_too(tmp_path, monkeypatch):
    from tracker.export import export
    from tracker.model import lookup
    from tracker.ops import OPS
    from tracker.paths import check_dir, check_file
    from tracker.report import report
    from tracker.store import open_store

    with pytest.raises(UnknownName, match="device name is empty"):
        lookup("")
    with pytest.raises(TrackerError, match="op conv twice"):
        OPS.parse_variants("conv=fused,conv=shared")
    assert OPS.parse_variants("conv=fused,lrn=shared") == {"conv": "fused", "lrn": "shared"}
    for check in (check_dir, lambda p: check_file(p, (".png",))):
        with pytest.raises(TrackerError, match="output path is empty"):
            check("")
    store = open_store(str(tmp_path / "never.db"), write=True)
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(TrackerError, match="output path is empty"):
            export(store, 1, "", "csv")
        with pytest.raises(TrackerError, match="output path is empty"):
            report(store, "last", "")
        with pytest.raises(UnknownName, match="unknown export format 'xlsx'"):
            export(store, 1, tmp_path / "out", "xlsx")
    finally:
        store.dispose()
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".csv"]


# 4. Library entry points check option values as the CLI does, from the same constants.

def test_choose_backend_refuses_an_unknown_one_with_a_suggestion():
    from tracker.profile import choose_backend

    with pytest.raises(UnknownName, match=r"unknown backend 'nuc' \(did you mean ncu\?\); known: auto, ncu"):
        choose_backend("nuc")
    assert choose_backend("model")[0] == "model"


@pytest.mark.parametrize("field, value", [("cache_control", "cold"), ("clock_control", "boost"),
                                          ("replay_mode", "range")])
def test_ncu_settings_are_checked_when_made(field, value):
    from tracker.profilers.ncu import Settings

    with pytest.raises(UnknownName, match=f"unknown ncu {field.split('_')[0]}"):
        Settings(**{field: value})
    assert Settings(cache_control="none", clock_control="none", replay_mode="application")


@pytest.mark.parametrize("kwargs, words", [
    (dict(backend="nuc"), "did you mean ncu"),
    (dict(phases="fw"), "unknown phases 'fw'"),
    (dict(dtype_bits=12), "dtype bits 12"),
    (dict(variants={"conv": "warp"}), "unknown conv variant 'warp'"),
    (dict(repeat=0), "repeat 0 is out of range"),
    (dict(warmup=-1), "warmup -1 is out of range"),
])
def test_profile_checks_its_arguments_before_the_database(tmp_path, kwargs, words):
    from tracker.nets import build
    from tracker.profile import profile

    with pytest.raises(TrackerError, match=words):
        profile(str(tmp_path / "t.db"), build("alexnet"), 1, **{"backend": "model", **kwargs})
    assert list(tmp_path.iterdir()) == []


def test_predict_refuses_unknown_phases():
    from tracker.model import predict
    from tracker.nets import build

    with pytest.raises(UnknownName, match="unknown phases 'fw'"):
        predict(build("alexnet"), 1, phases="fw")


def test_the_cli_choices_are_the_library_constants():
    from tracker import export, profile
    from tracker.profilers import ncu

    def choices(command, name):
        option = next(p for p in cli.commands[command].params if p.name == name)
        return tuple(option.type.choices)

    for command in ("profile", "experiment"):
        assert choices(command, "backend") == profile.BACKENDS
        assert choices(command, "cache_control") == ncu.CACHE_CONTROL
        assert choices(command, "clock_control") == ncu.CLOCK_CONTROL
    assert choices("export", "fmt") == export.FORMATS


def test_an_experiment_checks_every_arms_arguments_before_its_row(tmp_path):
    from tracker.experiment import run_experiment
    from tracker.model import lookup
    from tracker.nets import build

    for bad in ({"repeat": 0}, {"warmup": -1}, {"batches": (16, 0)}):
        with pytest.raises(TrackerError):
            run_experiment(str(tmp_path / "e.db"), "batch", build("alexnet"), 16, **{"batches": (16, 32), **bad},
                           backend="model", device=lookup("h100"))
    assert list(tmp_path.iterdir()) == []
