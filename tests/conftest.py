"""Shared fixtures. Store tests take ``db`` and run once on SQLite and once on PostgreSQL
(TRACKER_TEST_PG_URL, e.g. postgresql+psycopg://postgres@127.0.0.1:55432/postgres; .ci/run
starts such a server). Without that variable the PostgreSQL cases skip, unless
TRACKER_REQUIRE_PG is set, as in CI, where a skip would hide a missing server."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

PG_URL = os.environ.get("TRACKER_TEST_PG_URL")


@contextmanager
def admin(database: str | None = None) -> Iterator:
    """A superuser's connection (autocommit) to ``database`` (None: the test server's own), closed afterwards."""
    import psycopg
    from sqlalchemy import make_url

    url = make_url(PG_URL).set(drivername="postgresql")
    if database:
        url = url.set(database=database)
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as conn:
        yield conn


def pytest_configure(config):
    import suite_plugin  # how the GPU suite reports as it goes (tests/suite_plugin.py)

    config.pluginmanager.register(suite_plugin, "tracker_suite")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "emulator" in item.fixturenames:  # g++ builds the kernels, then OS threads run them: seconds each
            item.add_marker(pytest.mark.slow)
        if "gpu" in item.keywords:
            from tracker.gpu.detect import cuda_devices

            if not cuda_devices()[0]:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU"))


PG_READER = "tracker_test_reader"  # a role that can only read each test's schema (tracker.store.reader)


@pytest.fixture
def pg_url(monkeypatch):
    """A URL into a fresh, empty PostgreSQL schema, dropped afterwards; $TRACKER_READER_URL reaches
    it as ``PG_READER``, which tracker sql runs statements as."""
    if not PG_URL:
        if os.environ.get("TRACKER_REQUIRE_PG"):
            pytest.fail("TRACKER_REQUIRE_PG is set but TRACKER_TEST_PG_URL is not")
        pytest.skip("no PostgreSQL server (set TRACKER_TEST_PG_URL)")
    from sqlalchemy import create_engine, make_url, text

    from tracker.store.reader import READER_SETTINGS

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('tracker test reader'))"))  # one worker at a time
        conn.execute(
            text(
                f"DO $$ BEGIN CREATE ROLE {PG_READER} LOGIN; "
                "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
            )
        )
        for setting, value in READER_SETTINGS.items():  # as `tracker reader-role` sets them
            conn.execute(text(f"ALTER ROLE {PG_READER} SET {setting} = '{value}'"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA {schema} TO {PG_READER}"))
        conn.execute(text(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {PG_READER}"))
    reader = make_url(PG_URL).set(username=PG_READER).render_as_string(hide_password=False)
    monkeypatch.setenv("TRACKER_READER_URL", f"{reader}?options=-csearch_path%3D{schema}")
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request, tmp_path):
    """A trace database that does not exist yet: a SQLite path, or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "trace.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture(scope="session")
def emulator(tmp_path_factory):
    """tracker's CUDA kernels on the CPU (tests/emu), compiled once per session."""
    emu = pytest.importorskip("emu.emulator")
    if not emu.available():
        pytest.skip("needs g++ for the CUDA emulation")
    return emu.Emulator(tmp_path_factory.mktemp("emu"))


@pytest.fixture
def emulated_events(emulator, monkeypatch):
    """tracker profile --backend events, with the emulator for the GPU and made-up times
    (tests/made_up_times.py)."""
    from dataclasses import replace

    from made_up_times import made_up_ms

    import tracker.experiment
    import tracker.profile
    from tracker.gpu.network import PlanRunner
    from tracker.gpu.runner import Measured, measure
    from tracker.profile import Choice

    def profile_events(workload, echo):
        launches, _ = measure(
            PlanRunner.of(emulator, workload), workload.repeat, workload.warmup, workload.l1_policy, echo
        )
        return Measured(
            [replace(launch, time_ms=made_up_ms(launch.row())) for launch in launches],
            {"device_name": "CPU emulation (tests/emu)"},
            0,
        )

    def choose_backend(requested, options=None, implementations=()):
        return (
            Choice("model", "asked for")
            if requested == "model"
            else Choice("events", "test: CPU emulation, made-up times")
        )

    monkeypatch.setattr(tracker.profile, "choose_backend", choose_backend)
    monkeypatch.setattr(tracker.experiment, "choose_backend", choose_backend)
    monkeypatch.setattr("tracker.gpu.runner.profile_events", profile_events)


LIBRARY_DEVICE = {"device_name": "NVIDIA A100-PG509-200", "compute_capability": "8.0", "sm_count": 108}


@pytest.fixture
def gpu_seams(emulator, monkeypatch):
    """--backend events for both arms: ours on the emulator with made-up times, the library's the
    public A100 AlexNet trace's launch log (real kernels, times and starts), re-homed under our
    small net's range names where it runs (tests/public_trace.py). Needs PyTorch (the library
    arm records its versions)."""
    from dataclasses import replace

    from made_up_times import made_up_ms
    from public_trace import ALEXNET_RANGES, SMALL_NET_RANGES, TRACE, rehomed

    import tracker.experiment
    import tracker.profile
    from tracker.gpu.network import PlanRunner
    from tracker.gpu.runner import Measured, measure
    from tracker.library import kineto
    from tracker.profile import Choice

    pytest.importorskip("torch")

    def ours(workload, echo):
        launches, _ = measure(
            PlanRunner.of(emulator, workload), workload.repeat, workload.warmup, workload.l1_policy, echo
        )
        return Measured([replace(k, time_ms=made_up_ms(k.row())) for k in launches], LIBRARY_DEVICE, 0)

    def library(workload, echo):
        ranges = ALEXNET_RANGES if workload.network == "alexnet" else SMALL_NET_RANGES
        traced = kineto.kernels(rehomed(kineto.load(TRACE), ranges))
        launches, _ = kineto.launch_log(traced, workload.net, workload.implementation)
        return Measured(launches, LIBRARY_DEVICE, 0)

    def choose_backend(requested, options=None, implementations=()):
        return Choice("events", "test: the emulator and a public trace")

    for module in (tracker.profile, tracker.experiment):
        monkeypatch.setattr(module, "choose_backend", choose_backend)
    monkeypatch.setattr("tracker.gpu.runner.profile_events", ours)
    monkeypatch.setattr("tracker.library.torch_run.profile_events", library)


CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by selenium (Debian's chromium and chromium-driver; CI installs them
    and sets TRACKER_REQUIRE_BROWSER, so there a skip is a failure). Its console log is kept."""
    if not (CHROMEDRIVER and CHROMIUM):
        if os.environ.get("TRACKER_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromium-driver are required here (TRACKER_REQUIRE_BROWSER)")
        pytest.skip("no chromium / chromedriver on this machine")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--allow-file-access-from-files",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()
