"""``flux quantum emulator --reserve``: a Braket Direct window booked on a running emulator
on the wall clock, whatever the emulator's speed, and the site's table printed for it.

The emulator runs in this process on a ``WallClock`` (the command needs a timeline that
runs on the wall clock); the command runs through its ``main`` as from a shell, reading
the emulator's URL from an env file. The table it prints is read back with ``tomllib`` and
checked as the handler service checks the instance's tables.
"""

from __future__ import annotations

import json
import math
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flux_quantum.catalog import load_catalog, packaged_catalog_path
from flux_quantum.cli.emulator import export_lines, main
from flux_quantum.emulator import Emulator, ManualClock, ScaledClock, ScenarioError, WallClock
from flux_quantum.emulator.braket.direct import RESERVATIONS_PATH, book_wall, on_timeline
from flux_quantum.emulator.braket.scenario import RESERVATION_ARN
from flux_quantum.site import reservations as braket_direct

FORTE = "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1"
GARNET = "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"
SPEED = 10.0
CATALOG = str(packaged_catalog_path())


@pytest.fixture
def emulator(emulator_tier: None) -> Iterator[Emulator]:
    """The default scenario on a wall clock running ``SPEED`` times real time."""
    emu = Emulator(clock=WallClock(speed=SPEED)).start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def env_file(emulator: Emulator, tmp_path: Path) -> Path:
    path = tmp_path / "emulator.env"
    path.write_text("\n".join(export_lines(emulator.env())) + "\n")
    return path


def reserve(env_file: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["--env-file", str(env_file), "--catalog", CATALOG, *args])
    out, err = capsys.readouterr()
    return status, out, err


def read_table(text: str) -> dict:
    [entry] = tomllib.loads(text)["quantum"]["reservations"]
    return entry


def epoch(value: datetime) -> float:
    return value.timestamp()


# -- the emulator's side: a window on the wall clock ------------------------------------------


def test_a_wall_clock_maps_dates_to_its_timeline_and_back() -> None:
    clock = WallClock(speed=SPEED)
    wall = time.time()
    assert clock.at(wall) == pytest.approx(clock.now(), abs=0.5)
    assert clock.at(wall + 60) - clock.at(wall) == pytest.approx(60 * SPEED)
    assert clock.wall(clock.at(wall + 30)) == pytest.approx(wall + 30)


def test_a_window_given_on_the_wall_clock_goes_onto_the_timeline() -> None:
    clock = ScaledClock(speed=SPEED, paused=False)
    wall = time.time()
    fields = {"device": "Forte 1", "wall_start": wall + 20, "wall_end": wall + 80}
    mapped = on_timeline(fields, clock)
    assert set(mapped) == {"device", "start", "end"}
    assert mapped["end"] - mapped["start"] == pytest.approx(60 * SPEED)
    assert clock.wall(mapped["start"]) == pytest.approx(wall + 20)
    plain = {"device": "Forte 1", "start": 5, "end": 9}
    assert on_timeline(plain, ManualClock()) == plain


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"wall_start": 10.0}, "'wall_end' is required with 'wall_start'"),
        ({"wall_start": 10.0, "wall_end": "soon"}, "'wall_end' must be time.time() seconds"),
        ({"wall_start": 10.0, "wall_end": 20.0, "start": 3}, "'start' goes with neither"),
        ({"wall_start": True, "wall_end": 20.0}, "'wall_start' must be time.time() seconds"),
    ],
)
def test_a_wall_clock_window_refused_in_one_sentence(fields: dict, words: str) -> None:
    with pytest.raises(ScenarioError) as excinfo:
        on_timeline({"device": "Forte 1", **fields}, WallClock())
    assert str(excinfo.value).startswith("reservation: field ") and words in str(excinfo.value)


@pytest.mark.emulator
def test_a_manual_clock_takes_no_wall_clock_window() -> None:
    with Emulator(clock=ManualClock()) as emu:
        with pytest.raises(ValueError, match="needs an emulator whose clock runs on the wall"):
            book_wall(emu.url, FORTE, time.time() + 10, time.time() + 70)
        assert emu.reservations() == []


def test_the_emulator_gives_a_window_booked_without_an_arn_its_own(emulator: Emulator) -> None:
    wall = time.time()
    record = book_wall(emulator.url, GARNET, wall + 60, wall + 120, price_per_hour=100)
    # Braket's shape, in the device's region and the scenario's account.
    assert RESERVATION_ARN.fullmatch(record["arn"]), record
    assert record["arn"].startswith("arn:aws:braket:eu-north-1:123456789012:reservation/")
    assert (record["wall_start"], record["wall_end"]) == (
        pytest.approx(wall + 60),
        pytest.approx(wall + 120),
    )
    assert record["end"] - record["start"] == pytest.approx(60 * SPEED)
    assert record["cost"] == pytest.approx(100 * 60 * SPEED / 3600)  # emulated hours
    [booked] = emulator.reservations()
    assert (booked.arn, booked.device) == (record["arn"], GARNET)
    # The ids come from the seed: another emulator with the same seed gives the same one.
    with Emulator(clock=WallClock(speed=SPEED)) as twin:
        again = book_wall(twin.url, GARNET, wall + 60, wall + 120)
    assert again["arn"] == record["arn"]


def test_the_route_refuses_a_body_with_both_forms(emulator: Emulator) -> None:
    body = json.dumps({"device": FORTE, "start": 1, "end": 2, "wall_start": 1, "wall_end": 2})
    request = urllib.request.Request(
        emulator.url + RESERVATIONS_PATH, data=body.encode(), method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        opener.open(request, timeout=10)
    assert excinfo.value.code == 400
    assert "'start' goes with neither" in json.loads(excinfo.value.read())["message"]


# -- the command ------------------------------------------------------------------------------


def test_reserve_prints_the_sites_table_for_a_window_on_the_wall_clock(
    emulator: Emulator, env_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = time.time()
    status, out, err = reserve(
        env_file,
        capsys,
        *("--reserve", "local-forte1", "--in", "30s", "--for", "2m", "--name", "demo"),
        *("--price-per-hour", "7000", "--users", "alice,bob", "--on-end", "fail"),
    )
    after = time.time()
    assert status == 0, err
    assert out.startswith("[[quantum.reservations]]\n")
    entry = read_table(out)
    assert entry["name"] == "demo" and entry["device"] == "local-forte1"
    assert (entry["users"], entry["on_end"]) == (["alice", "bob"], "fail")
    start, end = epoch(entry["start"]), epoch(entry["end"])
    assert entry["start"].tzinfo == UTC and start == int(start)  # UTC, whole seconds
    assert before + 30 <= start <= math.ceil(after + 30)
    assert end - start == 120
    assert entry["cost"] == round(7000 * 120 / 3600, 2)  # the window's wall-clock hours
    # The emulator booked that very window on its timeline (10x faster), with that ARN.
    [booked] = emulator.reservations()
    assert (booked.arn, booked.device) == (entry["arn"], FORTE)
    assert emulator.clock.wall(booked.start) == pytest.approx(start, abs=1e-3)
    assert emulator.clock.wall(booked.end) == pytest.approx(end, abs=1e-3)
    assert booked.end - booked.start == pytest.approx(120 * SPEED)
    # What the handler service reads from the instance's configuration.
    devices = {device.name: device for device in load_catalog(CATALOG)}
    plain = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in entry.items()}
    [window] = braket_direct.ReservationBook.from_config([plain], devices)
    assert (window.arn, window.start, window.end) == (entry["arn"], start, end)
    assert window.on_end == "fail" and window.cost == entry["cost"]
    assert "booked local-forte1" in err and "demo" in err


def test_a_task_created_with_the_tables_arn_waits_for_the_window(
    emulator: Emulator,
    env_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from braket.aws import AwsDevice, AwsQuantumTask
    from braket.circuits import Circuit

    # The unmodified SDK pointed at the emulator (imported here: other modules load
    # t/emulator_fixtures.py as a pytest plugin, which must come first).
    from emulator_fixtures import point_sdk_at

    status, out, err = reserve(
        env_file, capsys, "--reserve", "local-forte1", "--in", "1h", "--for", "1h"
    )
    assert status == 0, err
    arn = read_table(out)["arn"]
    point_sdk_at(emulator, monkeypatch)
    task = AwsDevice(FORTE).run(Circuit().h(0).cnot(0, 1), shots=10, reservation_arn=arn)
    assert isinstance(task, AwsQuantumTask) and task.state() == "QUEUED"
    raw = task._aws_session.get_quantum_task(task.id)
    assert raw["associations"] == [{"arn": arn, "type": "RESERVATION_TIME_WINDOW_ARN"}]


def test_reserve_names_the_window_after_its_device_and_start_by_default(
    emulator: Emulator, env_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = reserve(env_file, capsys, "--reserve", "local:local-garnet", "--for", "90")
    assert status == 0, err
    entry = read_table(out)
    stamp = entry["start"].strftime("%Y%m%d-%H%M%S")
    assert entry["name"] == f"local-garnet-{stamp}"
    assert entry["cost"] == 0 and epoch(entry["end"]) - epoch(entry["start"]) == 90
    assert "users" not in entry and "on_end" not in entry
    assert [r.device for r in emulator.reservations()] == [GARNET]


def test_a_window_over_another_on_the_device_is_refused_by_the_emulator(
    emulator: Emulator, env_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = reserve(env_file, capsys, "--reserve", "local-forte1", "--for", "10m")
    assert status == 0, err
    status, out, err = reserve(
        env_file, capsys, "--reserve", "local-forte1", "--in", "5m", "--for", "10m"
    )
    assert status == 1 and out == ""
    assert err.startswith("flux-quantum: ERROR: the emulator at http://127.0.0.1:")
    assert "did not book the window: reservation: field 'start' puts a window" in err
    assert len(err.strip().splitlines()) == 1
    assert len(emulator.reservations()) == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--reserve", "nope", "--for", "1m"], "--reserve 'nope' is not a device of the catalog"),
        (["--reserve", "ibm:local-forte1", "--for", "1m"], "is not a device of the catalog"),
        (["--reserve", "fez", "--for", "1m"], "only Braket devices"),
        (["--reserve", "local-fez", "--for", "1m"], "only Braket devices"),
        (["--reserve", "local-forte1"], "--reserve needs --for DURATION"),
        (["--reserve", "local-forte1", "--for", "3x"], "--for must be a duration"),
        (["--reserve", "local-forte1", "--for", "0"], "--for must be at least one second"),
        (["--reserve", "local-forte1", "--for", "1m", "--in=-5s"], "--in must be a duration"),
        (["--reserve", "local-forte1", "--for", "1m", "--name", "Demo"], ".name must be lower"),
        (["--reserve", "local-forte1", "--for", "1m", "--users", "a,,b"], "--users must be"),
        (["--reserve", "local-forte1", "--for", "1m", "--jobs", "0"], ".jobs must be an integer"),
        (["--reserve", "local-forte1", "--for", "1m", "--stop"], "--stop and --reserve"),
        (["--for", "1m"], "--for goes with --reserve DEVICE"),
        (["--users", "alice"], "--users goes with --reserve DEVICE"),
    ],
)
def test_reserve_refuses_in_one_sentence_and_books_nothing(
    emulator: Emulator,
    env_file: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    words: str,
) -> None:
    status, out, err = reserve(env_file, capsys, *args)
    assert status == 1 and out == ""
    assert err.startswith("flux-quantum: ERROR: ") and words in err, err
    assert len(err.strip().splitlines()) == 1
    assert emulator.reservations() == []


def test_reserve_needs_the_env_file_of_a_running_emulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--reserve", "local-forte1", "--for", "1m"]) == 1
    assert "--reserve needs --env-file FILE" in capsys.readouterr().err
    gone = tmp_path / "gone.env"
    gone.write_text("export FLUX_QUANTUM_EMULATOR_URL=http://127.0.0.1:9\n")
    status, out, err = reserve(gone, capsys, "--reserve", "local-forte1", "--for", "1m")
    assert status == 1 and out == ""
    assert "did not book the window: emulator_url: cannot book at http://127.0.0.1:9" in err
