"""``flux quantum reservations``: the windows of a configuration checked against the
catalog (next, now, past; past ones for a day, all with --all), what the ledger recorded
in them when no service runs, -o/-n/--json, and a configuration error as one
``flux-quantum: ERROR:`` line; on the flux tier, the windows of a real instance's
configuration listed without a running service."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from catalogs import DEVICES

from flux_quantum.catalog import parse_catalog
from flux_quantum.cli.main import main
from flux_quantum.site.access import Requester
from flux_quantum.site.policy import SitePolicy

HOUR = 3600.0
ARN = "arn:aws:braket:us-east-1:123456789012:reservation/"
LOCAL_IBM = (
    "{name: local-fez, vendor: local, id: ibm_fez, class: qpu, qubits: 156,"
    " price: {per_minute: 96}}"
)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch):
    """Local time is UTC here, so the START/END columns read the same on every machine."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("FLUX_URI", raising=False)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def write_catalog(tmp_path: Path) -> Path:
    path = tmp_path / "backends.yaml"
    text = "devices:\n" + "".join(f"  - {DEVICES[n]}\n" for n in ("sv1", "forte1", "garnet"))
    path.write_text(text + f"  - {LOCAL_IBM}\n")
    return path


def toml_time(t: float) -> str:
    """A TOML date-time (UTC), as an admin writes it."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window(name: str, device: str, start: float, end: float, **keys: object) -> str:
    lines = [
        "[[quantum.reservations]]",
        f'name = "{name}"',
        f'device = "{device}"',
        f'arn = "{ARN}{name}"',
        f"start = {toml_time(start)}",
        f"end = {toml_time(end)}",
    ]
    keys.setdefault("cost", 7000.0)
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def setup(tmp_path: Path, *windows: str) -> list[str]:
    config = tmp_path / "quantum.toml"
    config.write_text("\n".join(windows))
    return ["--config", str(config), "--catalog", str(write_catalog(tmp_path))]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["reservations", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def hour_floor(t: float) -> float:
    return t - t % HOUR


def test_windows_next_now_and_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = hour_floor(time.time())
    argv = setup(
        tmp_path,
        window("forte-next", "forte1", now + 24 * HOUR, now + 26 * HOUR, users=["alice"]),
        window("garnet-now", "garnet", now - HOUR, now + 2 * HOUR, on_end="fail", cost=3000.0),
        window("garnet-done", "garnet", now - 5 * HOUR, now - 4 * HOUR, banks=["chem"]),
        window("forte-old", "forte1", now - 72 * HOUR, now - 71 * HOUR),
    )
    rc, out, err = run(capsys, *argv)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME", "STATE", "START(UTC)", "END(UTC)", "DEVICE", "ON_END", "WAIT", "ON_NODES",
        "TASKS", "QPU_TIME", "UTIL", "COST", "WHO",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert list(rows) == ["garnet-done", "garnet-now", "forte-next"]  # by start
    assert rows["garnet-now"][1] == "now" and rows["garnet-done"][1] == "past"
    assert rows["forte-next"][1] == "next"
    start = datetime.fromtimestamp(now - HOUR, UTC)
    assert rows["garnet-now"][2:4] == [start.strftime("%Y-%m-%d"), start.strftime("%H:%M")]
    assert rows["garnet-now"][6:10] == ["garnet", "fail", "-", "-"]
    assert rows["garnet-now"][-2:] == ["$3,000.00", "everyone"]
    assert rows["forte-next"][-3:] == ["$7,000.00", "users", "alice"]
    assert rows["garnet-done"][-3:] == ["$7,000.00", "banks", "chem"]
    assert lines[4:] == ["  (1 window(s) ended more than a day ago: --all lists them)"]
    # no service and no ledger: it says so in one line
    assert err.count("\n") == 1
    assert err.startswith("no live data (the windows of ") and "no ledger readable here" in err
    rc, out, _ = run(capsys, *argv, "--all", "-n", "-o", "{name} {state} {bank} {places}")
    assert out.splitlines() == [
        "forte-old past (site) 2",
        "garnet-done past (site) 2",
        "garnet-now now (site) 2",
        "forte-next next (site) 2",
    ]


def test_what_the_ledger_recorded_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = hour_floor(time.time())
    argv = setup(
        tmp_path, window("forte-now", "forte1", now - HOUR, now + HOUR, cost=14000.0, bank="chem")
    )
    ledger = tmp_path / "ledger.db"
    catalog = parse_catalog(write_catalog(tmp_path).read_text())
    quantum = {
        "ledger": {"path": str(ledger)},
        "reservations": [
            {"name": "forte-now", "device": "forte1", "arn": f"{ARN}forte-now",
             "start": now - HOUR, "end": now + HOUR, "cost": 14000.0, "bank": "chem"}
        ],
    }  # fmt: skip
    site = SitePolicy.from_config(quantum, devices={d.name: d for d in catalog})
    site.book_windows(now)
    reserved = site.reservations.lookup("forte-now")
    forte = catalog.get("forte1")
    assert forte is not None
    who = Requester(1000, "alice", "chem")
    for i, seconds in enumerate((1800.0, 1800.0, None)):
        token = f"w{i}"
        site.reserve(
            site.charge(forte, who, token=token, jobid=5, shots=100, t=now, reservation=reserved)
        )
        if seconds is not None:
            site.settle(token, forte, shots=100, state="COMPLETED", now=now,
                        reservation=reserved, qpu_seconds=seconds)  # fmt: skip
    site.close()
    rc, out, err = run(capsys, *argv, "--ledger", str(ledger))
    assert rc == 0
    row = out.splitlines()[1].split()
    assert row[0] == "forte-now" and row[8:14] == ["-", "-", "3", "1h", "50%", "$14,000.00"]
    assert err.count("\n") == 1 and "tasks and QPU time are the ledger's" in err
    rc, out, _ = run(capsys, *argv, "--ledger", str(ledger), "--json")
    report = json.loads(out)
    assert report["live"] is False and "no live data" in report["note"]
    (record,) = report["reservations"]
    assert (record["state"], record["tasks"], record["used_seconds"]) == ("now", 3, 3600.0)
    assert (record["utilisation"], record["share"], record["source"]) == (0.5, 7000.0, "ledger")
    assert (record["waiting"], record["active"]) == (None, None)
    assert record["start_at"] == toml_time(now - HOUR) and record["bank"] == "chem"


@pytest.mark.parametrize(
    "keys, device, sentence",
    [
        ({"cost": -1}, "forte1", "[quantum.reservations][1] (w).cost must be what the window"),
        ({"jobs": 0}, "forte1", "[quantum.reservations][1] (w).jobs must be an integer >= 1"),
        ({}, "local-fez", "(w).device 'local-fez' is on vendor local: only Braket devices"),
        ({}, "nope", "(w).device 'nope' is not in the catalog (devices: forte1, garnet"),
    ],
)
def test_a_configuration_error_is_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], keys, device, sentence
) -> None:
    now = hour_floor(time.time())
    argv = setup(tmp_path, window("w", device, now, now + HOUR, **keys))
    rc, out, err = run(capsys, *argv)
    assert rc == 1 and out == ""
    assert err.startswith("flux-quantum: ERROR: ") and sentence in err
    assert err.count("\n") == 1


def test_a_date_time_flux_would_misread_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = hour_floor(time.time())
    text = window("w", "forte1", now, now + HOUR)
    local = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    for written, read in (
        (f"{local}-05:00", f"{local}Z"),  # Flux drops the offset
        (local, f"{local}Z"),  # and takes a local date-time as UTC
    ):
        argv = setup(tmp_path, text.replace(f"start = {local}Z", f"start = {written}"))
        rc, out, err = run(capsys, *argv)
        assert rc == 1 and out == ""
        config = tmp_path / "quantum.toml"
        assert err.startswith(f"flux-quantum: ERROR: {config}: quantum.reservations[1].start = ")
        assert (
            f": Flux reads a TOML date-time's digits as UTC, so the instance would take it as {read}; write it in UTC (ending in Z) or as a quoted string"
            in err
        )
    # quoted, the offset is kept
    argv = setup(tmp_path, text.replace(f"start = {local}Z", f'start = "{local}+00:00"'))
    assert run(capsys, *argv)[0] == 0


def test_no_windows_and_no_instance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = setup(tmp_path, "[quantum.ledger]\npath = '/nowhere'\n")
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    assert out == (
        "no reserved QPU windows in this instance's configuration ([[quantum.reservations]])\n"
    )
    rc, out, _ = run(capsys, *argv, "--json")
    assert json.loads(out)["reservations"] == []
    rc, _, err = run(capsys, "--catalog", argv[-1])
    assert rc == 1
    assert "reads the instance's configuration: run it inside a Flux instance" in err
    rc, _, err = run(capsys, *argv, "--ledger", str(tmp_path / "x"))
    assert rc == 1 and err == f"flux-quantum: ERROR: {tmp_path / 'x'}: no ledger here\n"


@pytest.mark.flux
def test_a_real_instance_lists_its_windows_without_a_service(tmp_path: Path) -> None:
    from fluxinstance import FluxInstance, quantum_config

    now = hour_floor(time.time())
    text = quantum_config() + "\n" + window(
        "forte-next", "forte1", now + 2 * HOUR, now + 3 * HOUR, users=["alice", "bob"]
    )  # fmt: skip
    inst = FluxInstance(tmp_path, config=text).start()
    try:
        catalog = str(write_catalog(tmp_path))
        out = inst.quantum("reservations", "--catalog", catalog)
        lines = out.stdout.splitlines()
        assert lines[0].startswith("NAME ") and lines[1].split()[:2] == ["forte-next", "next"]
        assert lines[1].endswith("users alice, bob")
        assert "no live data (the qpu handler service 'qpu_handlers' is not running" in out.stderr
        report = json.loads(inst.quantum("reservations", "--catalog", catalog, "--json").stdout)
        (record,) = report["reservations"]
        assert report["live"] is False and record["start"] == now + 2 * HOUR
        assert record["start_at"] == toml_time(now + 2 * HOUR)
    finally:
        inst.stop()


def test_the_example_in_etc_is_a_valid_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """etc/flux-quantum/quantum.toml's commented [[quantum.reservations]], uncommented."""
    text = (Path(__file__).resolve().parents[2] / "etc/flux-quantum/quantum.toml").read_text()
    lines = text.splitlines()
    first = lines.index(next(line for line in lines if "[[quantum.reservations]]" in line))
    block = []
    for line in lines[first:]:
        if not line.startswith("# ") or line.startswith("# ("):
            break
        block.append(line[2:])
    argv = setup(tmp_path, "\n".join(block) + "\n")
    rc, out, _ = run(capsys, *argv, "--all", "-n", "-o", "{name} {device} {on_end} {who}")
    assert rc == 0 and out == "forte-dec03 forte1 on-demand users alice, bob\n"


def test_the_live_part_from_the_services_status() -> None:
    """A window as the service's status reports it (``reservations`` in ``flux quantum
    service status --json``): its jobs, tasks, QPU time and utilisation win over the
    ledger's, whose share is kept."""
    from flux_quantum.cli.reservations import window_record, window_row
    from flux_quantum.site.reservations import ReservationBook

    now = hour_floor(time.time())
    (forte,) = ReservationBook.from_config(
        [{"name": "w", "device": "forte1", "arn": f"{ARN}w", "start": now - HOUR,
          "end": now + HOUR, "cost": 7200.0}]
    )  # fmt: skip
    live = {"name": "w", "state": "now", "waiting": [11, 12, "x"], "active": [13],
            "tasks": 4, "used_seconds": 5400.0, "utilisation": 0.75}  # fmt: skip
    record = window_record(forte, now, live, (2, 100.0, 100.0))
    assert (record["waiting"], record["active"], record["tasks"]) == ([11, 12, "x"], [13], 4)
    assert (record["used_seconds"], record["utilisation"], record["share"]) == (5400.0, 0.75, 100.0)
    assert record["source"] == "service"
    row = window_row(record, "USD")
    assert (row["wait"], row["on_nodes"], row["tasks"], row["qpu_time"], row["util"]) == (
        "3", "1", "4", "1h30m", "75%",
    )  # fmt: skip
    assert row["jobids"].startswith("waiting: ") and "; on nodes: " in row["jobids"]
    # a service without a ledger says None: shown as "-"
    quiet = {**live, "tasks": None, "used_seconds": None, "utilisation": None}
    row = window_row(window_record(forte, now, quiet, None), "USD")
    assert (row["wait"], row["tasks"], row["qpu_time"], row["util"]) == ("3", "-", "-", "-")
    # a window the service does not report: the ledger's figures, no jobs
    record = window_record(forte, now, None, (2, 100.0, 100.0))
    assert (record["waiting"], record["tasks"], record["source"]) == (None, 2, "ledger")
    assert window_row(record, "USD")["wait"] == "-"
