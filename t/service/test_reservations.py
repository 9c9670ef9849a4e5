"""The site's Braket Direct windows (flux_quantum.site.reservations): every key of a
``[[quantum.reservations]]`` table refused with its own sentence, the date-time forms
(``flux config get``'s TOML date-time object, RFC 3339 with its offset, epoch seconds),
duplicate names, overlaps and non-Braket devices; who may use a window; admission into a
window (its lead, its places, its end: never a task that cannot run before the end) and
routing a job that named no window into one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from catalogs import catalog_of

from flux_quantum.catalog import parse_catalog
from flux_quantum.site.access import Requester
from flux_quantum.site.reservations import (
    FAIL,
    NEXT,
    NOW,
    ON_DEMAND,
    PAST,
    ReservationBook,
    ReservationConfigError,
    admission,
    format_seconds,
    iso,
    route,
)

CATALOG = catalog_of("sv1", "forte1", "garnet")
LOCAL = parse_catalog(
    "devices:\n"
    "  - {name: local-forte1, vendor: local, id: 'arn:aws:braket:us-east-1::device/qpu/ionq/"
    "Forte-1', class: qpu, qubits: 36, price: {per_task: 0.3, per_shot: 0.08}}\n"
    "  - {name: local-fez, vendor: local, id: ibm_fez, class: qpu, qubits: 156,"
    " price: {per_minute: 96}}\n"
    "  - {name: fez, vendor: ibm, id: ibm_fez, class: qpu, qubits: 156, price: {per_minute: 96}}\n"
)
DEVICES = {d.name: d for d in [*CATALOG, *LOCAL]}
ARN = "arn:aws:braket:us-east-1:123456789012:reservation/a1b2c3d4-0000-1111-2222-333344445555"
START = datetime(2026, 12, 3, 9, tzinfo=UTC).timestamp()
END = START + 3600.0
WHERE = "[quantum.reservations][1] (forte-dec03)"


def table(**keys: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": "forte-dec03",
        "device": "forte1",
        "arn": ARN,
        "start": {"iso-8601-ts": "2026-12-03T09:00:00Z"},
        "end": {"iso-8601-ts": "2026-12-03T10:00:00Z"},
        "cost": 7000.0,
    }
    entry.update(keys)
    return {k: v for k, v in entry.items() if v is not None}


def book(*entries: dict[str, object]) -> ReservationBook:
    return ReservationBook.from_config(list(entries), DEVICES)


def refused(*entries: object) -> str:
    with pytest.raises(ReservationConfigError) as caught:
        ReservationBook.from_config(list(entries), DEVICES)
    return str(caught.value)


# --- configuration -----------------------------------------------------------------------


def test_a_window_with_its_defaults_and_every_key() -> None:
    (window,) = book(table())
    assert (window.name, window.device, window.arn) == ("forte-dec03", "forte1", ARN)
    assert (window.start, window.end, window.duration, window.cost) == (START, END, 3600.0, 7000.0)
    assert (window.bank, window.on_end, window.route, window.route_within, window.jobs) == (
        None, ON_DEMAND, False, 0.0, 2,
    )  # fmt: skip
    assert window.describe_who() == "everyone" and window.label == "reservation forte-dec03"
    full = table(users=["alice", 1001], banks=["chem"], bank="chem", on_end="fail", route=True,
                 route_within="90m", jobs=4)  # fmt: skip
    (window,) = book(full)
    assert (window.bank, window.on_end, window.route, window.route_within, window.jobs) == (
        "chem", FAIL, True, 5400.0, 4,
    )  # fmt: skip
    assert window.describe_who() == "users 1001, alice in banks chem"
    assert window.to_dict()["start_at"] == "2026-12-03T09:00:00Z"
    assert ReservationBook.from_config(None).reservations == ()
    assert len(book()) == 0 and book().names() == "none"


@pytest.mark.parametrize(
    "value",
    [
        {"iso-8601-ts": "2026-12-03T09:00:00Z"},  # a TOML date-time, as flux config get gives it
        "2026-12-03T09:00:00Z",
        "2026-12-03T10:00:00+01:00",
        "2026-12-03T04:00:00-05:00",
        START,
        int(START),
    ],
)
def test_the_forms_of_a_date_time(value: object) -> None:
    (window,) = book(table(start=value))
    assert window.start == START


@pytest.mark.parametrize(
    "keys, sentence",
    [
        ({"name": None}, "[quantum.reservations][1] needs name"),
        ({"device": None}, "[quantum.reservations][1] needs device"),
        ({"arn": None}, "[quantum.reservations][1] needs arn"),
        ({"start": None}, "[quantum.reservations][1] needs start"),
        ({"end": None}, "[quantum.reservations][1] needs end"),
        ({"cost": None}, "[quantum.reservations][1] needs cost"),
        ({"colour": "red"}, "[quantum.reservations][1] has an unknown key 'colour' (accepted: "
         "name, device, arn, start, end, cost, users, banks, bank, on_end, route, route_within, "
         "jobs)"),
        ({"name": "Forte"}, "[quantum.reservations][1].name must be lower-case letters, digits,"
         " '-', '_', '.' (at most 64, first a letter or digit), got 'Forte'"),
        ({"name": "-x"}, "[quantum.reservations][1].name must be lower-case letters"),
        ({"name": 5}, "[quantum.reservations][1].name must be lower-case letters"),
        ({"device": 5}, f"{WHERE}.device must be a device name, got 5"),
        ({"device": "nope"}, f"{WHERE}.device 'nope' is not in the catalog (devices: fez, "
         "forte1, garnet, local-fez, local-forte1, sv1)"),
        ({"device": "fez"}, f"{WHERE}.device 'fez' is on vendor ibm: only Braket devices "
         "(vendor braket, or the emulator's local) have reservations"),
        ({"device": "local-fez"}, f"{WHERE}.device 'local-fez' is on vendor local: only Braket"),
        ({"device": "sv1"}, f"{WHERE}.device 'sv1' is a simulator: Braket Direct reserves QPUs only"),
        ({"arn": "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1"},
         f"{WHERE}.arn must be a Braket Direct reservation ARN "
         "(arn:aws:braket:REGION:ACCOUNT:reservation/ID), got 'arn:aws:braket:us-east-1::"),
        ({"start": "2026-12-03T09:00:00"}, f"{WHERE}.start must be a date-time with its offset "
         "(2026-12-03T09:00:00Z, as a TOML date-time or a string) or epoch seconds, got "
         "'2026-12-03T09:00:00'"),
        ({"start": "tomorrow"}, f"{WHERE}.start must be a date-time with its offset"),
        ({"start": True}, f"{WHERE}.start must be a date-time with its offset"),
        ({"start": -1}, f"{WHERE}.start must be a date-time with its offset"),
        ({"start": float("nan")}, f"{WHERE}.start must be a date-time with its offset"),
        ({"end": {"iso-8601-ts": "soon"}}, f"{WHERE}.end must be a date-time with its offset"),
        ({"end": {"iso-8601-ts": "2026-12-03T09:00:00Z"}},
         f"{WHERE}.end must be after start (2026-12-03T09:00:00Z), got 2026-12-03T09:00:00Z"),
        ({"cost": -1.0}, f"{WHERE}.cost must be what the window costs, a number >= 0, got -1.0"),
        ({"cost": "7000"}, f"{WHERE}.cost must be what the window costs"),
        ({"cost": True}, f"{WHERE}.cost must be what the window costs"),
        ({"cost": float("inf")}, f"{WHERE}.cost must be what the window costs"),
        ({"users": []}, f"{WHERE}.users must be a non-empty list of names or uids, got []"),
        ({"users": "alice"}, f"{WHERE}.users must be a non-empty list of names or uids"),
        ({"banks": [1]}, f"{WHERE}.banks must be a non-empty list of names, got [1]"),
        ({"bank": ""}, f"{WHERE}.bank must be a bank name, got ''"),
        ({"bank": 3}, f"{WHERE}.bank must be a bank name, got 3"),
        ({"on_end": "cancel"}, f'{WHERE}.on_end must be "on-demand" or "fail", got \'cancel\''),
        ({"route": "yes"}, f"{WHERE}.route must be true or false, got 'yes'"),
        ({"route_within": "2 hours"}, f"{WHERE}.route_within must be a duration >= 0 such as 0, "
         "90s, 30m or 2h, got '2 hours'"),
        ({"route_within": -5}, f"{WHERE}.route_within must be a duration >= 0"),
        ({"route_within": True}, f"{WHERE}.route_within must be a duration >= 0"),
        ({"jobs": 0}, f"{WHERE}.jobs must be an integer >= 1, got 0"),
        ({"jobs": 1.5}, f"{WHERE}.jobs must be an integer >= 1, got 1.5"),
        ({"jobs": True}, f"{WHERE}.jobs must be an integer >= 1, got True"),
    ],
)  # fmt: skip
def test_every_key_is_refused_with_its_sentence(keys: dict[str, object], sentence: str) -> None:
    assert refused(table(**keys)).startswith(sentence)


def test_the_list_its_tables_names_and_overlaps() -> None:
    with pytest.raises(ReservationConfigError, match=r"^\[quantum.reservations\] must be a list "
                       r"of tables \(\[\[quantum.reservations\]\]\), got \{'name': 'x'\}$"):  # fmt: skip
        ReservationBook.from_config({"name": "x"}, DEVICES)
    assert refused(table(), "forte") == ("[quantum.reservations][2] must be a table, got 'forte'")
    later = {"iso-8601-ts": "2026-12-04T09:00:00Z"}, {"iso-8601-ts": "2026-12-04T10:00:00Z"}
    assert refused(table(), table(start=later[0], end=later[1])) == (
        "[quantum.reservations][2].name 'forte-dec03' is already the name of reservation 1"
    )
    # a device has one window at a time: an overlap is refused, back to back is not
    half = "2026-12-03T09:30:00Z"
    assert refused(table(), table(name="forte-b", start=half, end="2026-12-03T11:00:00Z")) == (
        "[quantum.reservations] forte-dec03 and forte-b overlap on device forte1: a device has "
        "one reservation at a time"
    )
    inside = table(name="forte-c", start=half, end="2026-12-03T09:45:00Z")
    assert "forte-dec03 and forte-c overlap" in refused(table(), inside)
    windows = book(
        table(),
        table(name="forte-b", start="2026-12-03T10:00:00Z", end="2026-12-03T11:00:00Z"),
        table(name="garnet-a", device="garnet", arn=ARN[:-1] + "6"),
        table(name="local", device="local-forte1", arn=ARN[:-1] + "7"),
    )
    assert windows.names() == "forte-dec03, forte-b, garnet-a, local"
    assert windows.by_arn(ARN[:-1] + "6").name == "garnet-a"  # type: ignore[union-attr]
    assert windows.named("nope") is None and windows.by_arn("arn:x") is None
    assert windows.lookup("local").device == "local-forte1"
    with pytest.raises(LookupError) as caught:
        windows.lookup("forte-dec04")
    assert str(caught.value) == (
        "qpu.reservation 'forte-dec04' is not a reservation of this instance (configured: "
        "forte-dec03, forte-b, garnet-a, local)"
    )
    # without the catalog (the validator), any device name is taken as it is
    (unchecked,) = ReservationBook.from_config([table(device="fez")])
    assert unchecked.device == "fez"


def test_state_left_share_and_who() -> None:
    (window,) = book(table(users=["alice"], banks=["chem"], cost=7200.0))
    assert [window.state(t) for t in (START - 1, START, END - 1, END)] == [NEXT, NOW, NOW, PAST]
    assert [window.left(t) for t in (START - 600, START + 600, END + 5)] == [3600.0, 3000.0, 0.0]
    assert window.share(900.0) == 1800.0 and window.share(-5.0) == 0.0
    assert window.may_use(Requester(1000, "alice", "chem")) is True
    assert window.may_use(Requester(1000, "alice", "phys")) is False
    assert window.may_use(Requester(1001, "bob", "chem")) is False
    assert window.may_use(Requester(1000, "alice", None)) is None  # its bank not known yet
    (everyone,) = book(table())
    assert everyone.may_use(Requester(1001, "bob", None)) is True


def test_format_seconds_and_iso() -> None:
    shown = [format_seconds(s) for s in (-3, 45, 60, 720, 3600, 7500, 49 * 3600, 72 * 3600)]
    assert shown == ["0s", "45s", "1m", "12m", "1h", "2h05m", "2d1h", "3d"]
    assert iso(START) == "2026-12-03T09:00:00Z"


# --- admission -----------------------------------------------------------------------------

(WINDOW,) = book(table(jobs=2))


def admit(now: float, lead: float = 120.0, active: int = 0, task: float = 60.0):  # type: ignore[no-untyped-def]
    return admission(WINDOW, now=now, lead=lead, active=active, task_seconds=task)


def test_a_job_goes_in_its_lead_before_the_window_opens() -> None:
    early = admit(START - 600)
    assert (early.admit, early.ended, early.retry_at) == (False, False, START - 120)
    assert early.reason == (
        "reservation forte-dec03 opens in 10m (at 2026-12-03T09:00:00Z); the job goes in 2m before"
    )
    at_lead = admit(START - 120)
    assert at_lead.admit and at_lead.reason == (
        "reservation forte-dec03 opens in 2m <= lead 2m, 1 of 2 place(s)"
    )
    open_ = admit(START + 600, active=1)
    assert open_.admit and open_.reason == (
        "reservation forte-dec03 is open (50m left), 2 of 2 place(s)"
    )


def test_a_full_window_waits_for_a_place() -> None:
    full = admit(START + 60, active=2)
    assert (full.admit, full.ended, full.retry_at) == (False, False, None)
    assert full.reason == (
        "reservation forte-dec03: its 2 place(s) on nodes are taken; the next job goes in when "
        "one ends"
    )
    # a job waiting for its lead is told when, whatever the places
    assert admit(START - 3600, active=5).retry_at == START - 120


def test_no_job_goes_in_when_its_task_cannot_run_before_the_end() -> None:
    assert admit(END - 61).admit  # 61 s left for a 60 s task
    for now in (END - 60, END - 1):  # a task that would end at or after the end
        late = admit(now)
        assert (late.admit, late.ended, late.retry_at) == (False, True, None)
        assert late.reason == (
            "reservation forte-dec03 ends at 2026-12-03T10:00:00Z, too soon for a task of ~1m"
        )
    for now in (END, END + 3600):
        over = admit(now, task=0.0)
        assert (over.admit, over.ended) == (False, True)
        assert over.reason == "reservation forte-dec03 ended at 2026-12-03T10:00:00Z"
    # a window shorter than one task never takes one, even before it opens
    assert admit(START - 60, task=4000.0).ended
    # an unknown task time (0) admits up to the last moment, never at the end
    assert admit(END - 0.001, task=0.0).admit and admit(END, task=0.0).ended
    assert admit(END - 30, task=-5.0).admit  # a negative estimate counts as 0


# --- routing --------------------------------------------------------------------------------

ALICE = Requester(1000, "alice", "chem")


def routable(**keys: object) -> ReservationBook:
    return book(table(route=True, **keys))


def route_job(windows: ReservationBook, now: float = START - 1800, **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "now": now,
        "requester": ALICE,
        "devices": ["forte1", "garnet"],
        "public_wait": {"forte1": 7200.0},
        "max_wait": None,
        "waiting": {},
        "task_seconds": {"forte1": 60.0},
    }
    args.update(kw)
    return route(windows, **args)  # type: ignore[arg-type]


def test_a_window_sooner_than_the_public_queue_takes_the_job() -> None:
    chosen = route_job(routable())
    assert chosen.reservation is not None and chosen.reservation.name == "forte-dec03"
    assert chosen.reason == (
        "reservation forte-dec03 on forte1 opens in 30m, sooner than its public queue (~2h)"
    )
    # the public queue serves sooner, and it is not within route_within: not routed
    later = route_job(routable(), public_wait={"forte1": 600.0})
    assert later.reservation is None
    assert later.reason == (
        "reservation forte-dec03 opens in 30m, not sooner than the public queue (~10m)"
    )
    unknown = route_job(routable(), public_wait={})
    assert unknown.reason.endswith("not sooner than the public queue (unknown)")
    # within route_within it is cheaper: the window is paid
    cheaper = route_job(routable(route_within="1h"), public_wait={"forte1": 600.0})
    assert cheaper.reservation is not None
    assert cheaper.reason == (
        "reservation forte-dec03 on forte1 opens in 30m, within its route_within 1h: its "
        "tasks cost nothing more (the window is paid)"
    )
    # an open window opens "in 0s"
    assert route_job(routable(), now=START + 60).reason.startswith(
        "reservation forte-dec03 on forte1 opens in 0s, sooner"
    )


def test_what_keeps_a_job_out_of_a_window() -> None:
    assert route_job(book(table())) == route_job(book())  # route = false: never considered
    assert route_job(book()).reason == "" and route_job(book()).reservation is None
    assert route_job(routable(), devices=["garnet"]).reason == ""  # not a device it may use
    assert route_job(routable(), now=END).reason == ""  # over
    not_for = route_job(routable(users=["bob"]))
    assert not_for.reservation is None
    assert not_for.reason == "reservation forte-dec03: not for user alice (bank chem)"
    no_bank = route_job(routable(banks=["chem"]), requester=Requester(1000, "alice"))
    assert no_bank.reason == "reservation forte-dec03: not for user alice"  # bank unknown
    too_late = route_job(routable(), max_wait=600.0)
    assert too_late.reason == "reservation forte-dec03 opens in 30m, after max_wait"
    # full: the jobs already waiting and this one, a task each, must fit in what is left
    # (as admission counts: 60 tasks of 60 s do not fit in its hour, the last would end
    # at its end)
    full = route_job(routable(), waiting={"forte-dec03": 59})
    assert full.reason == "reservation forte-dec03 is full (59 job(s) wait for it)"
    assert route_job(routable(), waiting={"forte-dec03": 58}).reservation is not None
    # an open window with one task's time left takes no routed job: admission would not
    # let it in, and the window's end rule would apply to a job that never asked for it
    last = route_job(routable(), now=END - 60)
    assert last.reservation is None and admit(END - 60).ended
    assert route_job(routable(), now=END - 61).reservation is not None
    # a device's task time unknown (0): room until the end
    assert route_job(routable(), now=END - 1, task_seconds={}).reservation is not None


def test_the_first_window_to_open_wins_and_the_reasons_add_up() -> None:
    windows = book(
        table(name="forte-b", route=True, start="2026-12-03T10:00:00Z", end="2026-12-03T11:00:00Z"),
        table(route=True),
        table(name="garnet-x", device="garnet", arn=ARN[:-1] + "6", route=True, users=["bob"]),
    )  # fmt: skip
    chosen = route_job(windows, public_wait={"forte1": 86400.0})
    assert chosen.reservation is not None and chosen.reservation.name == "forte-dec03"
    refused_all = route_job(windows, public_wait={"forte1": 60.0})
    assert refused_all.reservation is None
    assert refused_all.reason == (
        "reservation forte-b opens in 1h30m, not sooner than the public queue (~1m); "
        "reservation forte-dec03 opens in 30m, not sooner than the public queue (~1m); "
        "reservation garnet-x: not for user alice (bank chem)"
    )
