"""examples/qaoa: the QAOA MaxCut example's optimiser, circuits and drivers (unit tier).

The optimisation runs against Braket's LocalSimulator, the simulator the emulator runs
tasks on, with real shot noise: what it asserts holds with a wide margin (60 runs of
the default seed: the best parameters' noise-free expected cut was 5.81-5.94, the bound
is 5.64; the best measured value beat the start by 1.0-1.4, the bound is 0.8).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

QAOA = Path(__file__).resolve().parents[2] / "examples" / "qaoa"
sys.path.insert(0, str(QAOA))

import maxcut  # noqa: E402  (examples/qaoa is not a package)


def simulate(program: str, shots: int = 1000) -> dict[str, int]:
    """Counts of PROGRAM from Braket's LocalSimulator (the emulator's simulator)."""
    from braket.devices import LocalSimulator
    from braket.ir.openqasm import Program

    result = LocalSimulator().run(Program(source=program), shots=shots).result()
    return dict(result.measurement_counts)


def test_the_maximum_cut_of_the_prism_is_7_by_brute_force():
    optimum, reaching = maxcut.max_cut()
    assert optimum == 7
    assert len(reaching) == 6 and all(maxcut.cut_value(b) == 7 for b in reaching)
    # Complements cut the same edges; no assignment of the 64 cuts 8 or more.
    assert {b.translate(str.maketrans("01", "10")) for b in reaching} == set(reaching)
    assert max(maxcut.cut_value(format(n, "06b")) for n in range(64)) == 7


def test_expected_cut_reads_c0_leftmost_and_refuses_bad_counts():
    # 100000: node 0 alone on its side cuts its three edges 0-1, 2-0, 0-3.
    assert maxcut.expected_cut({"100000": 3, "000000": 1}) == pytest.approx(9 / 4)
    assert maxcut.best_sample({"100000": 3, "011100": 1, "000000": 0}) == (7, "011100")
    with pytest.raises(ValueError, match="not a bitstring of 6 characters"):
        maxcut.expected_cut({"0101": 10})
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        maxcut.expected_cut({"000000": -1})
    with pytest.raises(ValueError, match="no shots"):
        maxcut.expected_cut({"000000": 0})


def test_start_qasm_is_program_0_of_the_default_configuration():
    state = maxcut.initial_state()
    assert (QAOA / "start.qasm").read_text() == maxcut.circuit(state["pending"])


def test_the_circuit_measures_what_the_exact_model_predicts():
    # At the best p=1 angles the simulator's mean cut matches the numpy statevector
    # (shot noise of 4000 shots: a standard deviation of about 0.02).
    value, gamma, beta = maxcut.best_p1()
    assert value == pytest.approx(5.939, abs=1e-3) and 0.5 < gamma < 0.65 and 0.3 < beta < 0.4
    program = maxcut.circuit([gamma, beta])
    assert maxcut.expected_cut(simulate(program, shots=4000)) == pytest.approx(value, abs=0.12)


def test_spsa_on_the_local_simulator_gets_close_to_the_best_qaoa_p1_can_do():
    config = maxcut.SpsaConfig()
    assert config.evaluations == 29
    state = maxcut.optimise(config, simulate)
    history = state["history"]
    assert len(history) == config.evaluations
    start, best = history[0], state["best"]
    bound, _, _ = maxcut.best_p1()  # 5.939; a random assignment cuts 4.5, the start 4.67
    assert start == pytest.approx(maxcut.exact_expected_cut(config.start), abs=0.2)
    assert best["value"] == max(history) >= start + 0.8
    assert history[best["evaluation"]] == best["value"]
    assert maxcut.exact_expected_cut(best["parameters"]) >= 0.95 * bound
    assert maxcut.exact_expected_cut(state["theta"]) >= 0.95 * bound
    # Some shot hit a maximum cut (the brute-force optimum).
    assert state["best_sample"][0] == 7
    assert maxcut.cut_value(state["best_sample"][1]) == 7


def fixed_values(n: int) -> list[float]:
    return [4.5 + 0.1 * math.sin(i) for i in range(n)]


def test_the_state_round_trips_through_json_and_advance_is_deterministic():
    config = maxcut.SpsaConfig(iterations=4, seed=3)
    runs = []
    for _ in range(2):
        state = maxcut.initial_state(config)
        trace = []
        for value in fixed_values(config.evaluations):
            assert json.loads(json.dumps(state)) == state
            again = maxcut.advance(json.loads(json.dumps(state)), value)
            state, parameters, done = maxcut.advance(state, value)
            assert again == (state, parameters, done)  # a restarted step decides the same
            trace.append((parameters, done))
        runs.append((trace, state))
    assert runs[0] == runs[1]
    assert [done for _, done in runs[0][0]] == [False] * 8 + [True]
    other = maxcut.initial_state(maxcut.SpsaConfig(iterations=4, seed=4))
    assert maxcut.advance(other, 4.5)[1] != runs[0][0][0][0]  # the seed matters
    with pytest.raises(ValueError, match="already done"):
        maxcut.advance(runs[0][1], 5.0)


def test_advance_follows_the_spsa_gain_sequences():
    config = maxcut.SpsaConfig(a=0.2, c=0.1, stability=2.0, seed=11)
    theta = list(config.start)
    state = maxcut.initial_state(config)
    assert state["pending"] == theta  # evaluation 0: the baseline at the start
    state, plus, _ = maxcut.advance(state, 4.6)
    delta = config.perturbation(0)
    assert set(delta) <= {-1.0, 1.0}
    c0 = 0.1 / 1**0.101
    assert plus == pytest.approx([t + c0 * d for t, d in zip(theta, delta, strict=True)])
    state, minus, _ = maxcut.advance(state, 5.0)
    assert minus == pytest.approx([t - c0 * d for t, d in zip(theta, delta, strict=True)])
    state, plus1, _ = maxcut.advance(state, 4.8)
    a0 = 0.2 / (0 + 1 + 2.0) ** 0.602
    moved = [t + a0 * (5.0 - 4.8) / (2 * c0 * d) for t, d in zip(theta, delta, strict=True)]
    assert state["theta"] == pytest.approx(moved)
    c1, delta1 = 0.1 / 2**0.101, config.perturbation(1)
    assert plus1 == pytest.approx([t + c1 * d for t, d in zip(moved, delta1, strict=True)])
    assert state["best"] == {"value": 5.0, "parameters": plus, "evaluation": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("theta"), "state.theta must be a list of 2 numbers"),
        (lambda s: s.update(version=9), "state.version 9 is not supported"),
        (lambda s: s["config"].update(a=-1), "a must be a number > 0"),
        (lambda s: s["config"].update(seed="x"), "state.config.seed must be a number"),
        (lambda s: s.update(evaluated=3), "state.history must hold one value per evaluation"),
        (lambda s: s.update(plus_value=None), "state.plus_value must be a number mid-pair"),
        (lambda s: s.update(best_sample=[7, "01"]), "bitstring must be 6 characters"),
    ],
)
def test_a_damaged_state_is_refused_naming_the_field(change, message):
    state = maxcut.initial_state()
    state, _, _ = maxcut.advance(state, 4.6)  # the baseline
    state, _, _ = maxcut.advance(state, 4.7)  # a pair's first: mid-pair now
    maxcut.decode_state(state)  # the state as built is valid
    change(state)
    with pytest.raises(ValueError, match=message):
        maxcut.decode_state(state)


# --- the chain's step program, on a real loop directory ------------------------------------


def load_script(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"qaoa_{name}", QAOA / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_loop(path: Path, program: str) -> Any:
    from flux_quantum.job.loop import LoopDir, LoopSpec

    spec = LoopSpec(
        id="qaoa-test",
        request={"device": "local:local-garnet"},
        command=("python", "examples/qaoa/step.py"),
        max_iterations=29,
        goal="max",
    )
    return LoopDir.create(path, spec, program)


def simulated_step(loop: Any, k: int, read: list[int] | None = None) -> Any:
    """Step k whose task k ran on Braket's LocalSimulator: only reading the task's result
    (through Flux and the service in a real step) is replaced; ``read`` records reads."""
    from flux_quantum.job.loop import Step
    from flux_quantum.vendors.base import TaskRef, TaskResult

    class SimulatedStep(Step):
        def result(self, timeout: float | None = None) -> TaskResult:
            if read is not None:
                read.append(self.iteration)
            ref = TaskRef(vendor="local", device="local-garnet", task_id=f"task-{self.iteration}")
            return TaskResult(task=ref, counts=simulate(self.program))

    return SimulatedStep(loop, k)


def test_the_step_program_runs_the_chain_and_a_repeated_step_decides_the_same(tmp_path):
    step_py = load_script("step")
    config = maxcut.SpsaConfig()
    loop = make_loop(tmp_path / "loop", (QAOA / "start.qasm").read_text())
    read: list[int] = []
    for k in range(config.evaluations):
        line = step_py.run(simulated_step(loop, k, read), config)
        assert line.startswith(f"evaluation {k}: expected cut ")
        report = loop.report(k)
        state = json.loads(loop.state_file.read_text())
        assert report.value == state["history"][k]
        if k < config.evaluations - 1:
            assert not report.done
            assert loop.program(k + 1).read_text() == maxcut.circuit(state["pending"])
        if k == 5:  # step 5 runs again (its job restarted after it saved the state)
            program, saved = loop.program(6).read_text(), loop.state_file.read_text()
            again = step_py.run(simulated_step(loop, 5, read), config)
            assert again == line and read.count(5) == 1  # the result was not read again
            assert loop.program(6).read_text() == program
            assert loop.state_file.read_text() == saved
    assert read == list(range(config.evaluations))
    assert loop.report(config.evaluations - 1).done
    assert loop.report(config.evaluations - 1).reason.startswith("SPSA done: 29/29 evaluations")
    assert not loop.program(config.evaluations).exists()
    state = json.loads(loop.state_file.read_text())
    bound, _, _ = maxcut.best_p1()
    assert maxcut.exact_expected_cut(state["best"]["parameters"]) >= 0.95 * bound


def test_the_step_program_refuses_a_foreign_program_0_or_state(tmp_path):
    from flux_quantum.errors import CommandError

    step_py = load_script("step")
    config = maxcut.SpsaConfig()
    loop = make_loop(tmp_path / "other", maxcut.circuit([0.2, 0.2]))
    with pytest.raises(CommandError, match="maxcut.py start --p 1"):
        step_py.run(simulated_step(loop, 0), config)
    loop = make_loop(tmp_path / "late", (QAOA / "start.qasm").read_text())
    loop.state_file.write_text(json.dumps(maxcut.initial_state(config)))
    with pytest.raises(CommandError, match="has 0 evaluations, but this is step 3"):
        step_py.run(simulated_step(loop, 3), config)


# --- the README's walkthrough, as written (flux tier) --------------------------------------


@pytest.mark.flux
def test_the_readme_walkthrough_runs_as_written(tmp_path):
    """examples/qaoa/README.md's commands typed into a login shell from the top of the
    clone (the one line added: the reader's ``cd``); about 4 minutes."""
    import re

    from walkthrough import blocks, no_emulator_left, run_walkthrough

    found = blocks("## Run it on the emulator", QAOA / "README.md")
    assert len(found) == 3, found
    assert found[1].startswith("flux quantum service start") and found[1].endswith("exit")
    out = re.sub(
        r"\x1b\[[0-9;]*m", "", run_walkthrough([f"cd {QAOA.parent.parent}", *found], tmp_path)
    )
    assert "Traceback" not in out, out
    assert "converged after iteration 28: SPSA done: 29/29 evaluations" in out, out
    assert re.search(r"^loop-[0-9a-f]{8} +28/29 +converged +local:local-garnet ", out, re.M), out
    assert (
        len(re.findall(r" loop-[0-9a-f]{8}\.2[678] loop-[0-9a-f]{8} 2[678] COMPLETED$", out, re.M))
        == 3
    ), out  # flux jobs
    # The chain's report and the in-job loop's end: noise-free value of the best angles.
    exact = [float(x) for x in re.findall(r"without shot noise: expected cut (\d\.\d+)", out)]
    bound, _, _ = maxcut.best_p1()
    assert len(exact) == 2 and min(exact) >= 0.95 * bound, out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "\nleft: 0\n" in out, out
    no_emulator_left(tmp_path)
