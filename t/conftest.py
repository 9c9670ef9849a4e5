"""Test tiers: the unit tier needs no Flux; the flux tier (marker ``flux``) starts
real Flux instances and is skipped, with one loud line, where ``flux`` is not on PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

FLUX = shutil.which("flux")
SKIP_REASON = (
    "flux tier SKIPPED: `flux` is not on PATH (build flux-core and flux-sched, see README)"
)


def pytest_report_header(config: pytest.Config) -> list[str]:
    import monitoring_tools
    import pgserver

    flux = f"flux tier: RUN with {FLUX}" if FLUX else SKIP_REASON
    return [
        flux,
        pgserver.missing() or f"PostgreSQL ledger tests: RUN with {pgserver.pg_bin()}",
        monitoring_tools.missing() or "monitoring tests (promtool, prometheus, tmux): RUN",
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FLUX:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "flux" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    import monitoring_tools
    import pgserver

    for reason in (None if FLUX else SKIP_REASON, pgserver.missing(), monitoring_tools.missing()):
        if reason is not None:
            terminalreporter.write_line("!" * 78)
            terminalreporter.write_line(reason, red=True, bold=True)
            terminalreporter.write_line("!" * 78)


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server for the session (``pgserver.PgServer``), started on
    first use and stopped at the end; skipped where it cannot run (``pgserver.missing``)."""
    import pgserver

    why = pgserver.missing()
    if why is not None:
        pytest.skip(why)
    server = pgserver.PgServer().start()
    try:
        yield server
    finally:
        server.remove()


def _ledger_backends() -> list[str]:
    import pgserver

    return ["sqlite"] + (["postgresql"] if pgserver.missing() is None else [])


@pytest.fixture(params=_ledger_backends())
def ledger(request: pytest.FixtureRequest, tmp_path: Path):
    """A ledger on each backend: SQLite always, PostgreSQL where it is installed
    (t/test_ledger_pg.py says once, loudly, when it is not)."""
    import pgserver

    from flux_quantum.site.ledger import Ledger

    if request.param == "sqlite":
        target = tmp_path / "state" / "flux-quantum" / "ledger.db"
        with Ledger(target) as opened:
            yield opened
        return
    server = request.getfixturevalue("pg_server")
    credentials = pgserver.credentials_file(tmp_path)
    url = server.url(server.database())
    with Ledger(url, cluster="test", credentials=str(credentials)) as opened:
        yield opened


@pytest.fixture(autouse=True, scope="session")
def _private_state_home(tmp_path_factory: pytest.TempPathFactory):
    """Tests never read or write the user's own state directory (a default ledger there
    belongs to the user's instances, whatever flux-quantum they run)."""
    import os

    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before
