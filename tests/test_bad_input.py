"""Bad input, through the real CLI and the library alike: one `Error:` line on stderr, a non-zero
exit, no 'internal error', nothing written; an unwritable output refused before any work."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.cli_errors import refused
from tracker.cli import cli
from tracker.errors import TrackerError, UnknownName

LONG = "a" * 300  # over the 255 bytes a file name may take
PROC = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc, where root may create nothing")


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def work(runner, tmp_path, monkeypatch) -> Path:
    """An empty current folder holding one model run in trace.db."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["profile", "alexnet", "--batch", "2", "--db", "trace.db"])
    assert result.exit_code == 0, result.output
    return tmp_path


# 1. Output paths that cannot be written: probed before any work, not asked of os.access (which
# says yes to root, /proc included).


@pytest.mark.parametrize(
    "args, words",
    [
        (["report", "last", "--out", LONG], ["cannot write to", "File name too long"]),
        (["report", "last", "--out", f"{LONG}/sub"], ["File name too long"]),
        (["export", "last", "--out", LONG], ["cannot write to", "File name too long"]),
        (["model", "alexnet", "--device", "h100", "--plot", f"{LONG}.png"], ["cannot write", "File name too long"]),
        pytest.param(["export", "last", "--out", "/proc/x"], ["cannot write to /proc/x"], marks=PROC),
        pytest.param(["report", "last", "--out", "/proc/nope"], ["cannot write to /proc/nope"], marks=PROC),
        pytest.param(
            ["report", "last", "--out", "/proc/nope/deeper"], ["cannot write to /proc/nope/deeper"], marks=PROC
        ),
        pytest.param(
            ["model", "alexnet", "--device", "h100", "--plot", "/proc/x.png"], ["cannot write /proc/x.png"], marks=PROC
        ),
    ],
)
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


@pytest.mark.parametrize(
    "args, words",
    [
        (["model", HUGE], ["unknown network"]),
        (["devices", HUGE], ["unknown device"]),
        (["model", "alexnet", "--device", HUGE], ["unknown device"]),
        (["model", "alexnet", "--format", HUGE], ["--format"]),
        (["model", "unet2d", "--input-size", HUGE], ["input size"]),
        (["experiment", HUGE, "alexnet"], ["is not one of"]),
    ],
)
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


@pytest.mark.parametrize(
    "args, words",
    [
        (["profile", "alexnet", "--variant", "conv=fused,conv=shared", "--backend", "model"], ["op conv twice"]),
        (
            ["profile", "alexnet", "--variant", "conv=fused,lrn=shared,conv=fused", "--backend", "model"],
            ["op conv twice"],
        ),
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
    ],
)
def test_empty_and_doubled_values_are_refused(runner, work, args, words):
    before = snapshot(work)
    refused(
        runner.invoke(
            cli, args + (["--db", "trace.db"] if args[0] in ("profile", "experiment", "export", "report") else [])
        ),
        *words,
    )
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


@pytest.mark.parametrize(
    "field, value", [("cache_control", "cold"), ("clock_control", "boost"), ("replay_mode", "range")]
)
def test_ncu_settings_are_checked_when_made(field, value):
    from tracker.profilers.ncu import Settings

    with pytest.raises(UnknownName, match=f"unknown ncu {field.split('_')[0]}"):
        Settings(**{field: value})
    assert Settings(cache_control="none", clock_control="none", replay_mode="application")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(backend="nuc"), "did you mean ncu"),
        (dict(phases="fw"), "unknown phases 'fw'"),
        (dict(dtype_bits=12), "dtype bits 12"),
        (dict(variants={"conv": "warp"}), "unknown conv variant 'warp'"),
        (dict(repeat=0), "repeat 0 is out of range"),
        (dict(warmup=-1), "warmup -1 is out of range"),
    ],
)
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
    from tracker import export, profile, timeline
    from tracker.profilers import ncu

    def choices(command, name):
        option = next(p for p in cli.commands[command].params if p.name == name)
        return tuple(option.type.choices)

    for command in ("profile", "experiment"):
        assert choices(command, "backend") == profile.BACKENDS
        assert choices(command, "cache_control") == ncu.CACHE_CONTROL
        assert choices(command, "clock_control") == ncu.CLOCK_CONTROL
    assert choices("export", "fmt") == (*export.FORMATS, *timeline.FORMATS)


def test_an_experiment_checks_every_arms_arguments_before_its_row(tmp_path):
    from tracker.experiment import run_experiment
    from tracker.model import lookup
    from tracker.nets import build

    for bad in ({"repeat": 0}, {"warmup": -1}, {"batches": (16, 0)}):
        with pytest.raises(TrackerError):
            run_experiment(
                str(tmp_path / "e.db"),
                "batch",
                build("alexnet"),
                16,
                **{"batches": (16, 32), **bad},
                backend="model",
                device=lookup("h100"),
            )
    assert list(tmp_path.iterdir()) == []


# 5. The probe of 365 bad invocations: each of these was a traceback, an internal error, a
# silent default or a file written.


@pytest.fixture
def experiment_db(runner, work) -> Path:
    """``work`` with experiment e1 (batch, two arms, model backend) in trace.db."""
    result = runner.invoke(
        cli,
        [
            "experiment",
            "batch",
            "alexnet",
            "--batches",
            "2,4",
            "--backend",
            "model",
            "--device",
            "h100",
            "--db",
            "trace.db",
        ],
    )
    assert result.exit_code == 0, result.output
    return work


@pytest.mark.parametrize(
    "label", ["0x0x0", "1x1x1", "128x128x0", "128x128x8/warp0x0", "128x128x8/warp", "128x128x8/stages3x"]
)
def test_a_tile_that_parses_but_cannot_be_built_is_one_line(runner, tmp_path, monkeypatch, label):
    monkeypatch.chdir(tmp_path)
    refused(runner.invoke(cli, ["kernels", "--tile", label]), "--tile", label)  # was ZeroDivisionError
    assert list(tmp_path.iterdir()) == []


def test_the_library_refuses_such_tiles_too():
    from tracker.gpu.compile import variant_rows
    from tracker.ops.gemm import DEFAULT, SHAPES, Tile

    for label in ("0x0x0", "1x1x1", "128x128x0", "8x8x8/warp0x0"):
        assert not Tile.parse(label).valid
        with pytest.raises(TrackerError, match="the GEMM core cannot build it"):
            Tile.parse(label).check()
    assert not Tile(128, 128, 8, split=-1).valid
    assert all(t.valid for t in SHAPES) and DEFAULT.check() is DEFAULT
    with pytest.raises(ValueError, match="'warp' needs a number"):
        Tile.parse("128x128x8/warp")
    with pytest.raises(TrackerError, match="0x0x0: the GEMM core cannot build it"):
        variant_rows("sm_90", ("ca",), Tile(0, 0, 0))  # before NVRTC sees -D TILE_K=0


@pytest.mark.parametrize(
    "position, words", [("99999999999999999999", ["e1 has no arm 9999", "0 to 1"]), ("2", ["e1 has no arm 2"])]
)
def test_an_arm_out_of_range_is_one_line(runner, experiment_db, position, words):
    before = snapshot(experiment_db)
    refused(runner.invoke(cli, ["arm", "e1", position, "--db", "trace.db"]), *words)  # was OverflowError
    assert snapshot(experiment_db) == before


def test_arm_on_a_database_that_does_not_exist_creates_none(runner, work):
    before = snapshot(work)
    refused(runner.invoke(cli, ["arm", "e1", "0", "--db", "nosuch.db"]), "no trace database at")
    assert snapshot(work) == before  # nosuch.db was created (and its schema written)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--batches", ""], ["--batches is empty"]),  # ran at --batch 128
        (["--batches", "16,,64"], ["--batches '16,,64' has an empty item"]),
        (["--batches", ","], ["has an empty item"]),
        (["--variants", ""], ["--variants is empty"]),
        (["--variants", "global,"], ["--variants 'global,' has an empty item"]),
        (["--gpus", " "], ["--gpus is empty"]),
        (["--gpus", "h100,,a100"], ["has an empty item"]),
        (["--poll", "nan"], ["--poll", "'nan' is not a number"]),
        (["--poll", "-NaN"], ["is not a number"]),
    ],
)
def test_empty_lists_and_nan_are_refused(runner, work, args, words):
    before = snapshot(work)
    refused(
        runner.invoke(
            cli, ["experiment", "batch", "alexnet", "--backend", "model", "--device", "h100", "--db", "trace.db", *args]
        ),
        *words,
    )
    assert snapshot(work) == before


@pytest.mark.parametrize("variant, words", [("", ["--variant is empty"]), ("conv=fused,", ["has an empty item"])])
def test_an_empty_variant_list_is_refused_by_cli_and_library(runner, work, variant, words):
    from tracker.ops import OPS

    before = snapshot(work)
    refused(
        runner.invoke(cli, ["profile", "alexnet", "--backend", "model", "--variant", variant, "--db", "trace.db"]),
        *words,
    )  # '' ran every op's default
    assert snapshot(work) == before
    with pytest.raises(TrackerError, match=words[0]):
        OPS.parse_variants(variant)
    assert OPS.parse_variants(None) == {}


def test_report_refuses_against_for_an_experiment(runner, experiment_db):
    before = snapshot(experiment_db)
    refused(
        runner.invoke(cli, ["report", "e1", "--against", "1", "--out", "out", "--db", "trace.db"]),
        "--against 1",
        "drop --against",
    )  # was drawn without it, silently
    assert snapshot(experiment_db) == before


@pytest.mark.parametrize(
    "args",
    [
        ["export", "last", "--out", "~nosuchuser-tracker/x"],
        ["report", "last", "--out", "~nosuchuser-tracker/x"],
        ["model", "alexnet", "--device", "h100", "--plot", "~nosuchuser-tracker/x.png"],
        ["profile", "alexnet", "--backend", "model", "--ncu-report", "~nosuchuser-tracker/x.ncu-rep"],
        ["experiment", "batch", "alexnet", "--executor", "slurm", "--logs", "~nosuchuser-tracker/x"],
    ],
)
def test_an_unknown_users_home_in_an_output_path_is_one_line(runner, work, args):
    before = snapshot(work)
    refused(
        runner.invoke(cli, args + (["--db", "trace.db"] if args[0] != "model" else [])),
        "~nosuchuser-tracker/x",
        "no such user's home directory",
    )
    assert snapshot(work) == before  # export wrote ./~nosuchuser-tracker/x


def test_output_paths_expand_home_as_db_does(runner, work, monkeypatch):
    from tracker.paths import expand

    home = work / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    result = runner.invoke(cli, ["export", "last", "--out", "~/x", "--db", "~/../trace.db"])
    assert result.exit_code == 0, result.output
    assert (home / "x").is_dir() and not (work / "~").exists()
    assert expand("~/a") == home / "a" and expand("a/~") == Path("a/~")


@pytest.mark.parametrize(
    "spec, words",
    [
        (
            "torch_models:forward_raises",
            ["your model's forward raised RuntimeError: mat1 and mat2 shapes"],
        ),  # internal error
        ("torch_models:exits", ["exits() raised SystemExit"]),  # exited 0, silently
        ("builtins:exit", ["exit() raised SystemExit"]),
        ("torch_models:no_leaves", ["NoLeaves has no leaf modules"]),  # stored a run of no layer
    ],
)
def test_a_users_model_that_fails_is_one_line(runner, work, monkeypatch, spec, words):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    before = snapshot(work)
    refused(runner.invoke(cli, ["profile", "--torch", spec, "--backend", "model", "--db", "trace.db"]), *words)
    assert snapshot(work) == before


INTERRUPT_IMPORT = """
import builtins, sys
real, target = builtins.__import__, sys.argv[1]
def interrupted(name, *args, **kwargs):
    if name.startswith(target):
        raise KeyboardInterrupt  # as Ctrl-C would, while that module imports
    return real(name, *args, **kwargs)
builtins.__import__ = interrupted
from tracker.__main__ import main
sys.argv[1:] = ["model", "alexnet"]
main()
"""


@pytest.mark.parametrize("module", ["tracker.cli", "tracker.nets", "click"])
def test_ctrl_c_while_the_cli_imports_is_one_line_and_exit_130(tmp_path, module):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT_IMPORT, module], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, "Error: interrupted\n", "")
    assert list(tmp_path.iterdir()) == []


def test_the_entry_points_are_the_one_that_catches_it():
    import tomllib

    root = Path(__file__).parent.parent
    assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"] == {
        "tracker": "tracker.__main__:main"
    }
    assert 'if __name__ == "__main__":\n    main()' in (root / "tracker" / "__main__.py").read_text()


# 6. tracker sql's --limit and --timeout: a huge limit was an internal ValueError,
# --timeout inf an OverflowError on PostgreSQL. Checked by the library's own bounds, at the CLI
# before the database is opened.

SQL_BAD_VALUES = [
    ("--limit", v) for v in ("99999999999999999999999", "1000000000001", "0", "-1", "inf", "nan", "1.5")
] + [("--timeout", v) for v in ("inf", "1e999", "-inf", "nan", "-1", "0", "1e300", "86401")]


@pytest.mark.parametrize("option, value", SQL_BAD_VALUES)
def test_sql_limit_and_timeout_out_of_range_are_one_line(runner, work, option, value):
    before = snapshot(work)
    refused(runner.invoke(cli, ["sql", "SELECT 1", option, value, "--db", "trace.db"]), option)
    assert snapshot(work) == before


def test_run_sql_and_query_refuse_them_too(work):
    from tracker.store import open_store, query, run_sql
    from tracker.store.sql import MAX_ROWS, MAX_TIMEOUT_S

    store = open_store("trace.db", write=False)
    before = snapshot(work)
    for limit in (10**23, 10**5000, MAX_ROWS + 1, 0, -1, True, 1.5, float("inf"), "5"):
        with pytest.raises(TrackerError, match=r"^the row limit must be a whole number from 1 to \d+, not "):
            run_sql(store, "SELECT 1", limit=limit)
    for timeout_s in (float("inf"), float("-inf"), float("nan"), -1, 0, MAX_TIMEOUT_S * 2, 10**5000, True, "60"):
        with pytest.raises(TrackerError, match=r"^the time limit must be a positive number of seconds, at most "):
            run_sql(store, "SELECT 1", timeout_s=timeout_s)
        with (
            pytest.raises(TrackerError, match="^the time limit must be"),
            query(store, "SELECT 1", timeout_s=timeout_s),
        ):
            pass
    assert run_sql(store, "SELECT 1", limit=MAX_ROWS, timeout_s=MAX_TIMEOUT_S)[1] == [(1,)]
    assert snapshot(work) == before


def test_filters_wider_than_the_implicit_gemms_tap_bits_are_refused():
    """The loaders keep a bit a filter tap along each axis in one int: 15 a side in 2-D, 10 in 3-D."""
    from tracker.ops.conv2d import conv_shape
    from tracker.ops.conv3d import conv3_shape

    conv_shape((1, 3, 227, 227), (64, 3, 11, 11), 4, 2)  # AlexNet's conv1
    conv_shape((1, 1, 40000, 8), (1, 1, 15, 3), 1, 1)  # no limit on the sizes
    with pytest.raises(ValueError, match="a 16x3 filter is over the kernels' 15 taps a side in 2-D"):
        conv_shape((1, 1, 64, 64), (1, 1, 16, 3), 1, 1)
    conv3_shape((1, 1, 1020, 8, 8), (1, 1, 10, 3, 3), 1, 1)
    with pytest.raises(ValueError, match="a 3x11x3 filter is over the kernels' 10 taps a side in 3-D"):
        conv3_shape((1, 1, 32, 32, 32), (1, 1, 3, 11, 3), 1, 1)


def test_a_padding_wider_than_the_filter_is_refused():
    """The weight gradient's count of the taps a window meets (common.cuh's taps_inside) takes a
    padding of at most the filter's side: a wider one is refused, as a launch and as a network's
    layer."""
    from types import SimpleNamespace

    from tracker.nets.layers import Conv
    from tracker.ops.conv2d import conv_shape, unsupported
    from tracker.ops.conv3d import conv3_shape

    conv_shape((1, 1, 8, 8), (1, 1, 3, 3), 1, 3)  # as wide as the filter: taken
    with pytest.raises(ValueError, match=r"^a padding of 4 is wider than the 3x3 filter \(the kernels take at most"):
        conv_shape((1, 1, 8, 8), (1, 1, 3, 3), 1, 4)
    with pytest.raises(ValueError, match="^a padding of 2 is wider than the 1x1x1 filter"):
        conv3_shape((1, 1, 4, 4, 4), (1, 1, 1, 1, 1), 1, 2)
    wide = SimpleNamespace(op=Conv(out_channels=4, kernel=(1, 1), stride=(1, 1), padding=(2, 2)))
    assert unsupported(wide) == "padded past its filter"
    assert unsupported(SimpleNamespace(op=Conv(out_channels=4, kernel=(3, 3), stride=(1, 1), padding=(1, 1)))) is None
