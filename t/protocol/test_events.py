"""Unit tier: the qpu-* eventlog protocol (flux_quantum.protocol.events): every record turns
into its context and back, malformed contexts are refused, the one parser skips what is
not an event, and the one replay folds a job's events into what the service continues
from."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields

import pytest

from flux_quantum.protocol import events
from flux_quantum.protocol.events import merge_histories, parse_eventlog, replay, task_token


def ev(name, t=100.0, **context):
    return {"timestamp": t, "name": name, "context": context}


TOKEN0 = "fq-7-1-0-0"
TOKEN1 = "fq-7-1-0-1"


def test_replay_submit_then_task_is_a_task_to_reattach():
    history = replay(
        [
            ev("submit", userid=0),
            ev("dependency-add", description="qpu"),
            ev("qpu-select", index=0, attempt=0, device="sv1"),
            ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0, device="sv1"),
            ev(
                "qpu-task",
                t=101.5,
                unit=7,
                index=0,
                attempt=0,
                token=TOKEN0,
                task="arn:t1",
                device="sv1",
            ),
            ev("qpu-queue", index=0, attempt=0, position=8, milestone=10),
        ]
    )
    assert history.unit == 7
    slot = history.programs[0]
    assert (slot.token, slot.task, slot.device) == (TOKEN0, "arn:t1", "sv1")
    assert slot.queued_at == 101.5
    assert slot.milestones == (10,)
    assert ("qpu-submit", 0, 0) in history.facts and ("qpu-task", 0, 0) in history.facts
    assert not history.released


def test_replay_submit_without_task_keeps_the_token():
    history = replay([ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0, device="garnet")])
    assert history.programs[0].token == TOKEN0
    assert history.programs[0].task is None


def test_replay_failover_starts_a_new_attempt_with_exclusions():
    history = replay(
        [
            ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0, device="forte"),
            ev("qpu-task", unit=7, index=0, attempt=0, token=TOKEN0, task="arn:t1"),
            ev("qpu-failover", index=0, attempt=1, exclude=["forte"], **{"class": "simulator"}),
        ]
    )
    slot = history.programs[0]
    assert (slot.attempt, slot.token, slot.task) == (1, None, None)
    assert slot.exclude == ("forte",)
    assert slot.device_class == "simulator"
    history = replay(
        [
            *[
                ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0, device="forte"),
                ev("qpu-failover", index=0, attempt=1, exclude=["forte"]),
            ],
            ev(
                "qpu-submit",
                unit=7,
                index=0,
                attempt=1,
                token=TOKEN1,
                device="sv1",
                exclude=["forte"],
            ),
        ]
    )
    assert (history.programs[0].attempt, history.programs[0].token) == (1, TOKEN1)
    assert history.programs[0].exclude == ("forte",)


def test_replay_ignores_a_task_of_an_older_attempt_and_sees_release():
    history = replay(
        [
            ev("qpu-submit", unit=7, index=0, attempt=1, token=TOKEN1, device="sv1"),
            ev("qpu-task", unit=7, index=0, attempt=0, token=TOKEN0, task="arn:old"),
            ev("qpu-release", task="arn:x"),
        ]
    )
    assert history.programs[0].task is None
    assert history.released


def test_replay_batch_and_join():
    history = replay(
        [
            ev("qpu-join", unit=9, via="group"),
            ev("qpu-submit", unit=9, index=0, attempt=0, token="a", device="sv1"),
            ev("qpu-submit", unit=9, index=1, attempt=0, token="b", device="sv1"),
            ev("qpu-task", unit=9, index=1, attempt=0, token="b", task="arn:b"),
        ]
    )
    assert history.unit == 9
    assert history.programs[0].task is None and history.programs[1].task == "arn:b"


def test_merge_histories_takes_the_most_advanced_member():
    behind = replay([ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0, device="sv1")])
    ahead = replay(
        [
            ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0, device="sv1"),
            ev("qpu-task", unit=7, index=0, attempt=0, token=TOKEN0, task="arn:t"),
        ]
    )
    assert merge_histories([behind, ahead])[0].task == "arn:t"
    assert merge_histories([ahead, behind])[0].task == "arn:t"
    assert merge_histories([]) == {}


def test_task_token_is_stable_short_and_distinct():
    token = task_token(123456789012345678, 1795941366.476426, 3, 2)
    assert token == task_token(123456789012345678, 1795941366.476426, 3, 2)
    assert len(token) <= 64
    assert token != task_token(123456789012345678, 1795941366.476426, 3, 1)
    assert token != task_token(123456789012345678, 1795941999.0, 3, 2)


SAMPLES: dict[str, events.QpuEvent] = {
    r.name: r
    for r in (
        events.Select(index=0, attempt=0, device="sv1", explanation={"policy": "min-cost"}),
        events.Submit(
            unit=7,
            index=0,
            attempt=1,
            token=TOKEN1,
            device="sv1",
            vendor="braket",
            shots=100,
            program="a.qasm",
            exclude=("forte",),
            device_class="simulator",
            since=1795941366.25,
            ahead=12,
            session="0123456789ab",
            reservation="forte-dec03",
        ),
        events.TaskCreated(unit=7, index=0, attempt=1, token=TOKEN1, task="arn:t", device="sv1"),
        events.QueueMilestone(index=0, attempt=1, milestone=10, position=8, task="arn:t"),
        events.Wait(index=0, reason="all 1 slot(s) of solo in use", retry_in=2.0),
        events.Retry(index=0, operation="create", code="Throttling", message="m", retry_in=1.0),
        events.SubmitFailed(index=0, attempt=0, device="sv1", reason="bad", code="Validation"),
        events.TaskFailed(
            index=0, attempt=0, device="sv1", task="arn:t", state="FAILED", reason="x"
        ),
        events.MaxWaitExceeded(
            index=0,
            attempt=0,
            device="sv1",
            task="arn:t",
            waited=61.0,
            max_wait=60.0,
            action="cancel the stranded task",
        ),
        events.DeviceUnavailable(index=0, attempt=0, device="sv1", status="OFFLINE (MAINTENANCE)"),
        events.Failover(
            index=0,
            attempt=1,
            reason="r",
            mode="simulator",
            failed="forte",
            exclude=("forte",),
            device_class="simulator",
        ),
        events.Inputs(after=("after-success=ƒ2bZ4", "begin-time=1700000000.000")),
        events.Ready(
            index=0, attempt=0, tasks=({"index": 0, "task": "arn:t", "why": "COMPLETED"},)
        ),
        events.Join(unit=7, via="group", late=True),
        events.Session(
            device="fez",
            requested="dedicated",
            mode="batch",
            fingerprint="0123456789ab",
            reason="IBM refused a dedicated session on fez (1352)",
        ),
        events.SessionClosed(device="fez", fingerprint="0123456789ab", reason="its jobs failed"),
        events.Release(task="arn:t", device="sv1"),
        events.Cost(
            index=0,
            attempt=0,
            token=TOKEN1,
            device="sv1",
            cost=0.00375,
            estimate=0.00375,
            currency="USD",
            state="COMPLETED",
            task="arn:t",
            billed_seconds=3.0,
        ),
        events.ReservationEnded(
            reservation="forte-dec03",
            end=1796288400.0,
            action="on-demand",
            index=0,
            attempt=0,
            task="arn:t",
            reason="reservation forte-dec03 ended at 2026-12-03T10:00:00Z",
        ),
        events.Compile(
            index=0,
            attempt=0,
            device="kingston",
            form="mapped",
            layout=(3, 4),
            calibration="2026-12-07T00:00:00Z",
            success=0.9412,
            two_qubit_gates=1,
            depth=7,
            seconds=0.031,
            program='OPENQASM 3.0;\ninclude "stdgates.inc";\nbit[2] c;\ncz $3, $4;\n',
        ),
    )
}


def test_every_event_name_has_a_record_and_one_sample():
    assert set(SAMPLES) == events.NAMES
    assert all(name.startswith("qpu-") for name in events.NAMES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_record_survives_the_eventlog(name):
    record = SAMPLES[name]
    context = json.loads(json.dumps(record.to_context()))  # what Flux stores
    assert events.decode(events.Event(name, 1.0, context)) == record


def test_context_keys_are_the_protocols_spelling():
    submit = SAMPLES[events.SUBMIT].to_context()
    assert submit["class"] == "simulator" and "device_class" not in submit
    assert SAMPLES[events.FAILOVER].to_context()["from"] == "forte"
    assert "late" not in events.Join(unit=1).to_context()
    assert (
        "exclude"
        not in events.Submit(unit=1, index=0, attempt=0, token="t", device="d").to_context()
    )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_required_key_missing_or_mistyped_is_refused(name):
    cls = type(SAMPLES[name])
    context = SAMPLES[name].to_context()
    for f in fields(cls):
        key = cls.context_keys.get(f.name, f.name)
        required = f.default is MISSING and f.default_factory is MISSING
        if not required:
            continue
        broken = {k: v for k, v in context.items() if k != key}
        assert events.decode(events.Event(name, 1.0, broken)) is None
        assert events.decode(events.Event(name, 1.0, {**context, key: ["wrong"]})) is None


def test_bool_is_not_an_int_and_ints_are_floats():
    assert events.Wait.decode({"index": True, "reason": "r"}) is None
    assert events.Wait.decode({"index": 0, "reason": "r", "retry_in": 2}).retry_in == 2.0


def test_parse_eventlog_skips_what_is_not_an_event():
    text = "\n".join(
        [
            json.dumps(ev("submit")),
            "{truncated",
            "",
            json.dumps({"no": "name"}),
            json.dumps(ev("clean")),
        ]
    )
    assert [e.name for e in parse_eventlog(text)] == ["submit", "clean"]
    assert [e.name for e in parse_eventlog(text.encode())] == ["submit", "clean"]
    assert parse_eventlog(None) == []
    assert parse_eventlog([ev("submit", t=5.0)])[0].timestamp == 5.0


def test_first_times_and_ends_hold():
    log = parse_eventlog([ev("submit", t=1.0), ev("qpu-task", t=2.0), ev("qpu-task", t=3.0)])
    assert events.first_times(log) == {"submit": 1.0, "qpu-task": 2.0}
    assert events.ends_hold(events.Event("qpu-release"))
    assert events.ends_hold(events.Event("exception", 0.0, {"severity": 0}))
    assert not events.ends_hold(events.Event("exception", 0.0, {"severity": 1}))
    assert not events.ends_hold(events.Event("qpu-task"))


def test_replay_keeps_since_ahead_and_the_session():
    """What an IBM recovery needs: the time before the create and the pending count
    (qpu-submit), and the session (qpu-session) until qpu-session-closed."""
    submit = events.Submit(
        unit=7, index=0, attempt=0, token="fq-7-1-0-0", device="fez", since=100.5, ahead=4
    )
    session = events.Session(device="fez", requested="dedicated", mode="dedicated",
                             fingerprint="abcdef012345")  # fmt: skip
    log = [
        ev(events.SESSION, t=1.0, **session.to_context()),
        ev(events.SUBMIT, t=2.0, **submit.to_context()),
    ]
    history = events.replay(log)
    prog = history.programs[0]
    assert (prog.since, prog.ahead, prog.task) == (100.5, 4, None)
    assert history.session == session and not history.session_closed
    closed = events.SessionClosed(device="fez", fingerprint="abcdef012345", reason="failed")
    history = events.replay([*log, ev(events.SESSION_CLOSED, t=3.0, **closed.to_context())])
    assert history.session_closed
    other = events.SessionClosed(device="fez", fingerprint="ffffffffffff")
    assert not events.replay([*log, ev(events.SESSION_CLOSED, **other.to_context())]).session_closed


def test_replay_keeps_the_window_of_a_token_and_the_windows_that_ended():
    """What a recovery of a job in a reserved window needs: the window its token was
    recorded with (admitted: its task carries the ARN), and the windows its eventlog
    says ended (not said again)."""
    submit = events.Submit(
        unit=7, index=0, attempt=0, token=TOKEN0, device="forte1", reservation="forte-dec03"
    )
    history = replay([ev(events.SUBMIT, **submit.to_context())])
    assert history.programs[0].reservation == "forte-dec03"
    assert history.reservations_ended == ()
    ended = events.ReservationEnded(reservation="forte-dec03", end=200.0, action="on-demand")
    failover = events.Failover(index=0, attempt=1, reason="ended", mode="on-demand")
    history = replay(
        [
            ev(events.SUBMIT, **submit.to_context()),
            ev(events.RESERVATION_ENDED, **ended.to_context()),
            ev(events.FAILOVER, **failover.to_context()),
        ]
    )
    assert history.reservations_ended == ("forte-dec03",)
    prog = history.programs[0]
    assert (prog.attempt, prog.token, prog.reservation) == (1, None, None)
    # A context without the window's end is refused, as any malformed one.
    assert events.ReservationEnded.decode({"reservation": "x", "action": "fail"}) is None


def test_replay_keeps_when_the_jobs_other_dependencies_stopped_holding_its_task():
    assert replay([ev("qpu-submit", unit=7, index=0, attempt=0, token=TOKEN0)]).inputs_at is None
    history = replay(
        [
            ev("qpu-inputs", t=150.0, after=["after-success=ƒ2bZ4"]),
            ev("qpu-submit", t=151.0, unit=7, index=0, attempt=0, token=TOKEN0, device="sv1"),
            ev("qpu-inputs", t=170.0, after=[]),
        ]
    )
    assert history.inputs_at == 150.0
    assert history.programs[0].token == TOKEN0
