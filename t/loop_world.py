"""The world of the flux-tier loop tests: a real instance with the real service, the
emulator's Braket side and an IBM backend at ``SPEED`` times the wall clock, the loops'
devices, the site's ledger, and the step scripts a loop's steps run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fluxinstance import quantum_config
from ibm_setup import Ibm
from loop_setup import PROGRAM, STEP_SH

from flux_quantum.catalog import load_catalog
from flux_quantum.emulator import Emulator, ScaledClock, Scenario
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.local.vendor import LocalVendor

SPEED = 20.0  # emulated seconds a wall second
SHOTS = 100
TASK_COST = 0.4  # $0.30 a task + $0.001 a shot
LONG_SHOTS = 20_000  # another user's task that keeps a device busy (0.05 s a shot: 1000 s)

# Program 0 measures |0>; each step flips the next program (X or not), so iteration k
# measures k % 2 on every shot: the value a step reports shows which program ran.
FLIP = "x q[0];\n"


def _device(name: str, qubits: int = 20, faults: tuple[Any, ...] = (), **queue: Any) -> Any:
    return {
        "arn": f"arn:aws:braket:us-east-1::device/qpu/emulator/{name}",
        "name": name,
        "qubits": qubits,
        "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
        "queue": {"service_time": 10.0, **queue},
        "faults": list(faults),
    }


SCENARIO = {
    "devices": [
        _device("Loop"),
        _device("Kill", service_time=40.0),  # 2 s of wall time a task: time to kill -9
        _device("Hold", shot_time=0.05),
        _device("Fail", faults=({"fail_task": "calibration drifted", "calls": [2]},)),
        _device("Cost"),
        _device("Pina", qubits=30),
        _device("Pinb", qubits=30),
    ]
}
IBM_SCENARIO = {
    "backends": [
        {"name": "ibm_kingston", "qubits": 20, "queue": {"service_time": 10, "shot_time": 0.05}}
    ]
}


CATALOG = (
    "devices:\n"
    + "".join(
        f"  - {{name: q-{d['name'].lower()}, vendor: local, id: {d['arn']}, class: qpu,"
        f" qubits: {d['qubits']}, price: {{per_task: 0.3, per_shot: 0.001}}, slots: 4,"
        " properties: {drain_seconds_per_task: 10}}\n"
        for d in SCENARIO["devices"]
    )
    + "  - {name: kingston, vendor: ibm, id: ibm_kingston, class: qpu, qubits: 20,"
    " price: {per_minute: 96}, slots: 4, properties: {drain_seconds_per_task: 15}}\n"
)


# The step in Python (flux_quantum.job.loop.Step): reads result k through the service,
# reports the share of 1s as its value, keeps every value in its state, writes program
# k+1 (program k flipped).
STEP_PY = f"""
from flux_quantum.job.loop import Step

FLIP = {FLIP!r}
step = Step.current()
counts = step.result().counts
value = counts.get("1", 0) / sum(counts.values())
step.save_state({{"values": [*step.state.get("values", []), value]}})
program = step.program
if FLIP in program:
    program = program.replace(FLIP, "")
else:
    program = program.replace("c[0] =", FLIP + "c[0] =")
step.next(program, value=value)
"""

# The step in shell (the environment contract): reads result k with flux quantum task,
# reports k as its value and the same program again; exits 3 at iteration $1, if given.

# The same step, but step 0 does its work only once the file $1 exists (the test opens
# the gate when what it waits for has happened).
GATED_SH = """
if [ "$FLUX_QPU_ITERATION" = 0 ]; then while [ ! -e "$1" ]; do sleep 0.1; done; fi
exec sh "$(dirname "$0")/step.sh"
"""
# The Python step, gated the same way ($2: the Python to run it with).
GATED_PY_SH = """
if [ "$FLUX_QPU_ITERATION" = 0 ]; then while [ ! -e "$1" ]; do sleep 0.1; done; fi
exec "$2" "$(dirname "$0")/step.py"
"""


class World(Ibm):
    """``Ibm``'s instance (QRMI's settings in the service's environment) over an emulator
    whose clock runs at ``SPEED``, with the loops' devices and the site's ledger; the
    service started. ``vendor`` reads the emulator as any client of it would."""

    def __init__(self, workdir: Path) -> None:
        clock = ScaledClock(SPEED, paused=False)
        emu = Emulator(
            Scenario.from_dict(SCENARIO), clock=clock, ibm=IbmScenario.from_dict(IBM_SCENARIO)
        )
        ledger = workdir / "ledger" / "ledger.db"
        config = quantum_config() + f'\n[quantum.ledger]\npath = "{ledger}"\n'
        super().__init__(workdir, emu, CATALOG, config)
        self.devices = load_catalog(self.catalog)
        self.vendor = LocalVendor.from_emulator(self.emu, devices=self.devices.devices)
        self.write("program.qasm", PROGRAM)
        self.write("step.py", STEP_PY)
        self.write("step.sh", STEP_SH)
        self.write("gated.sh", GATED_SH)
        self.write("gated_py.sh", GATED_PY_SH)
        self.start_service()

    def write(self, name: str, text: str) -> Path:
        path = self.inst.workdir / name
        path.write_text(text)
        return path

    # -- the user's side: the CLI

    def loop(self, *args: str, check: bool = True) -> Any:
        return self.inst.quantum("loop", *args, check=check, env=self.job_env)

    def submit_loop(self, name: str, *args: str, command: tuple[str, ...] = ()) -> str:
        """``flux quantum loop submit --name=NAME ARGS -- COMMAND``: the loop's id."""
        command = command or (sys.executable, "step.py")
        out = self.loop(
            "submit", f"--name={name}", "--program=program.qasm", f"--shots={SHOTS}", *args,
            "--", *command,
        ).stdout  # fmt: skip
        assert out.strip() == name
        return name

    def gated_step(self, gate: Path) -> tuple[str, ...]:
        """The Python step's command, step 0 doing its work (reading its result, planning
        step 1) only once ``gate`` exists."""
        return ("sh", "gated_py.sh", str(gate), sys.executable)

    def loop_status(self, name: str) -> dict[str, Any]:
        return json.loads(self.loop("status", "--json", name).stdout)

    def wait_loop(self, name: str, timeout: float = 120) -> Any:
        return self.inst.run(
            ["flux", "quantum", "loop", "wait", name, f"--timeout={timeout:g}"],
            check=False,
            timeout=timeout + 30,
        )

    def step_job(self, name: str, k: int) -> str:
        """Step k's job (the journal has it once step k-1 submitted it: wait for step
        k-1's ``finish``, which comes after)."""
        if k > 0:
            self.wait_event(self.step_job(name, k - 1), "finish", timeout=60)
        steps = self.loop_status(name)["steps"]
        return next(s["job"] for s in steps if s["iteration"] == k)

    def step_rows(self, name: str) -> list[list[str]]:
        """``flux jobs`` of the loop's steps: id, name, {user.qpu_loop}, {user.qpu_iteration}."""
        fmt = "{id.f58} {name} {user.qpu_loop} {user.qpu_iteration}"
        out = self.inst.run(["flux", "jobs", "-a", "-n", "-o", fmt]).stdout
        rows = [line.split() for line in out.splitlines()]
        return sorted((r for r in rows if r[1].startswith(name + ".")), key=lambda r: r[1])

    def jobspec_qpu(self, jobid: str) -> dict[str, Any]:
        spec = json.loads(self.inst.run(["flux", "job", "info", jobid, "jobspec"]).stdout)
        return spec["attributes"]["system"]["qpu"]

    # -- the emulator's side

    def task_state(self, task_id: str) -> TaskState:
        return self.vendor.poll(self.vendor.attach(task_id)).state

    def ended_at(self, task_id: str) -> float:
        """When the emulator ended ``task_id``, in wall time (``time.time()``)."""
        ended = self.emu.task_timeline(task_id).ended
        assert ended is not None, f"{task_id} has not ended"
        return self.clock.wall(ended)

    def blocker(self, device: str) -> str:
        """Another user's long task on ``device`` (1000 s of device time): what is
        queued after it waits."""
        task = self.vendor.submit(self.devices.get(device), PROGRAM, LONG_SHOTS, f"other-{device}")
        return task.task_id
