"""The loop's pure parts: spec, journal, replay, decisions, the step's files (no Flux)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import JobTask
from flux_quantum.job.loop import (
    BUDGET,
    CONVERGED,
    FAILED,
    MAX_REACHED,
    Ended,
    LoopDir,
    LoopSpec,
    Moved,
    Resources,
    Started,
    Step,
    Stepped,
    StepReport,
    Submitted,
    decide,
    decode_line,
    replay,
)
from flux_quantum.job.loopsteps import task_facts

PROGRAM = "OPENQASM 3;\nqubit[1] q;\nbit[1] c;\nh q[0];\nc[0] = measure q[0];\n"


def spec(**kw: object) -> LoopSpec:
    base: dict[str, object] = {
        "id": "vqe",
        "request": {"device": "local:local-garnet", "shots": 100},
        "command": ("python", "step.py"),
    }
    base.update(kw)
    return LoopSpec(**base)  # type: ignore[arg-type]


def test_spec_round_trips_and_refuses_bad_fields() -> None:
    s = spec(max_cost=2.5, resources=Resources(nodes=2, time_limit="5m"))
    assert LoopSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    with pytest.raises(CommandError, match="max-iterations must be an integer from 1"):
        spec(max_iterations=0)
    with pytest.raises(CommandError, match="loop name 'Bad Name' is not valid"):
        spec(id="Bad Name")
    with pytest.raises(CommandError, match="qpu.program is set by the loop itself"):
        spec(request={"device": "sv1", "program": "a.qasm"})
    with pytest.raises(CommandError, match="qpu.shots"):
        spec(request={"device": "sv1", "shots": -1})
    with pytest.raises(CommandError, match="not a loop spec"):
        LoopSpec.from_dict({"id": "x"})


def test_step_request_pins_the_device_and_passes_the_budget(tmp_path: Path) -> None:
    s = spec(request={"device": "local:any", "policy": "min-cost", "shots": 10})
    first = s.step_request(0, tmp_path / "0.qasm", None, 3.0)
    assert first["device"] == "local:any" and first["policy"] == "min-cost"
    assert first["loop"] == "vqe" and first["release_at"] == "done" and first["max_cost"] == 3.0
    assert (
        spec(request={"device": "sv1", "release_at": "predict"}).step_request(
            1, tmp_path / "1.qasm", "sv1", None
        )["release_at"]
        == "predict"
    )
    later = s.step_request(4, tmp_path / "4.qasm", "local:local-garnet", None)
    assert later["device"] == "local:local-garnet" and "policy" not in later
    assert later["program"] == str(tmp_path / "4.qasm") and "max_cost" not in later


def test_journal_decoder_trusts_no_line() -> None:
    good = Submitted(0, 1234, None).to_line(1.0)
    assert decode_line(good) == Submitted(0, 1234)
    for bad in (
        "",
        "{torn",
        "[]",
        json.dumps({"name": "submitted", "iteration": "0", "jobid": 1}),
        json.dumps({"name": "ended", "iteration": 0, "outcome": "exploded", "reason": "x"}),
        json.dumps({"name": "unknown", "iteration": 0}),
        json.dumps({"name": ["submitted"], "iteration": 0, "jobid": 1}),  # unhashable name
    ):
        assert decode_line(bad) is None


def test_replay_folds_the_journal() -> None:
    records = [
        Submitted(0, 10),
        Started(0, 10),
        Stepped(0, 10, 0, "local:local-garnet", "t0", 0.5, -1.0),
        Submitted(1, 11, "local:local-garnet"),
        Stepped(1, 11, 0, "local:local-aria", "t1", None, -2.0),
        Moved(1, "local:local-garnet", "local:local-aria"),
        Stepped(7, 99, 0),  # a step never submitted: ignored
        Submitted(2, 12, "local:local-aria"),
        Ended(2, "cancelled", "by its user"),
        Submitted(3, 13),  # after the end: ignored
    ]
    h = replay(records)
    assert h.iteration == 2 and h.device == "local:local-aria"
    assert h.spent == 0.5 and h.unsettled == 1
    assert h.best == (-2.0, 1)
    assert replay(records, "max").best == (-1.0, 0)
    assert h.live_jobs() == [12] and h.ended is not None and h.ended.outcome == "cancelled"


def test_decide_covers_every_end() -> None:
    s = spec(max_iterations=3, max_cost=1.0)
    h = replay([Submitted(0, 10)])
    ok = Stepped(0, 10, 0, "local:local-garnet", "t", 0.25)
    d = decide(s, h, ok, StepReport(value=-1.5))
    assert d.ended is None and d.next_device == "local:local-garnet" and d.budget == 0.75
    assert d.stepped.value == -1.5

    def ended(stepped: Stepped, report: StepReport, history: object = h) -> Ended:
        out = decide(s, history, stepped, report).ended  # type: ignore[arg-type]
        assert out is not None
        return out

    assert ended(Stepped(0, 10, 3), StepReport()).outcome == FAILED
    assert "killed by signal 9" in ended(Stepped(0, 10, -9), StepReport()).reason
    assert ended(ok, StepReport(done=True)).outcome == CONVERGED
    h2 = replay(
        [
            Submitted(0, 10),
            Stepped(0, 10, 0, cost=0.0),
            Submitted(1, 11),
            Stepped(1, 11, 0),
            Submitted(2, 12),
        ]
    )
    assert ended(Stepped(2, 12, 0), StepReport(), h2).outcome == MAX_REACHED
    assert ended(Stepped(0, 10, 0, "d", "t", 1.0), StepReport()).outcome == BUDGET
    short = ended(Stepped(0, 10, 0, "d", "t", 0.6), StepReport())
    assert short.outcome == BUDGET and "the 0.40 left would not pay another task" in short.reason
    h3 = replay([Submitted(0, 10), Stepped(0, 10, 0, "a:x"), Submitted(1, 11)])
    moved = decide(s, h3, Stepped(1, 11, 0, "a:y"), StepReport())
    assert moved.moved == Moved(1, "a:x", "a:y") and moved.next_device == "a:y"


def test_the_step_api_and_the_shell_contract(tmp_path: Path) -> None:
    loop = LoopDir.create(tmp_path / "vqe", spec(), PROGRAM)
    assert loop.program(0).read_text() == PROGRAM
    with pytest.raises(CommandError, match="already holds a loop"):
        LoopDir.create(tmp_path / "vqe", spec(), PROGRAM)
    env = {"FLUX_QPU_LOOP_DIR": str(loop.path), "FLUX_QPU_ITERATION": "0"}
    step = Step.current(env)
    assert step.state == {} and step.program == PROGRAM
    step.save_state({"theta": [0.1, 0.2], "k": 1})
    step.next(PROGRAM.replace("h", "x"), value=-0.5)
    assert Step.current(env).state == {"theta": [0.1, 0.2], "k": 1}
    assert loop.report(0) == StepReport(value=-0.5, done=False)
    Step(loop, 1).done(value=-0.75, reason="gradient below 1e-3")
    assert loop.report(1) == StepReport(value=-0.75, done=True, reason="gradient below 1e-3")
    # A step that said nothing and wrote no program ends the loop; the shell's value file.
    loop.value_file(2).write_text("-0.9\n")
    assert loop.report(2) == StepReport(value=-0.9, done=True)
    with pytest.raises(CommandError, match="not in a loop's step"):
        Step.current({})
    with pytest.raises(ValueError, match="finite"):
        step.next(PROGRAM, value=float("nan"))
    with loop.locked():
        loop.append(Submitted(0, 5), Ended(0, "failed", "x"))
    assert loop.history().ended == Ended(0, "failed", "x")
    assert LoopDir.open(loop.path).spec == loop.spec


def test_a_steps_task_is_read_from_its_released_job_else_from_the_shell_plugin() -> None:
    # Without the job-shell plugin (no FLUX_QPU_* in the step's environment) the loop
    # still learns where its task ran, from the job's released jobspec: else later steps
    # would not be pinned and no cost would be read.
    job = JobTask(7, "arn:task-7", "q-loop", ("arn:task-7",), vendor="local")
    plugin = {"FLUX_QPU_TASK": "t-1", "FLUX_QPU_DEVICE": "garnet", "FLUX_QPU_VENDOR": "braket"}
    assert task_facts(job, {}) == ("local:q-loop", "arn:task-7")
    assert task_facts(job, plugin) == ("local:q-loop", "arn:task-7")
    assert task_facts(None, plugin) == ("braket:garnet", "t-1")
    assert task_facts(None, {}) == (None, None)


def test_a_budget_spent_to_the_cent_ends_the_loop_despite_float_sums() -> None:
    # 0.70 + 0.70 + 0.70 sums to 4.4e-16 under 2.10: that is no budget left for a fourth
    # task (its qpu.max_cost would be rounded to 0 and the step refused: a failed loop).
    s = spec(max_cost=2.1)
    h = replay(
        [
            Submitted(0, 10),
            Stepped(0, 10, 0, "d", "t0", 0.7),
            Submitted(1, 11, "d"),
            Stepped(1, 11, 0, "d", "t1", 0.7),
            Submitted(2, 12, "d"),
        ]
    )
    out = decide(s, h, Stepped(2, 12, 0, "d", "t2", 0.7), StepReport())
    assert out.ended is not None and out.ended.outcome == BUDGET, out
    assert out.ended.reason == "spent 2.10 of max-cost 2.10"
    going = decide(s, h, Stepped(2, 12, 0, "d", "t2", 0.35), StepReport())
    assert going.ended is None and going.budget == 0.35
