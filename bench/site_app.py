"""bench/site.py's applications: the thread that runs one job of the trace as the user's
program would (its tasks, its polls, a loop's steps).
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from site_fleet import APP_POLL, CORES_PER_NODE, DEVICES, JobRecord, Ledger, Vendor
from site_jobs import ADAPTIVE
from site_steps import Holding, StepPlanner

from flux_quantum.job.hold import Hold, HoldState
from flux_quantum.timing.step_plan import StepAction

HOLD_CHECK = 0.1  # wall seconds between reads of the service's forecast while a step holds


def app_polls(wait_wall: float, factor: float) -> int:
    """Polls an application makes while waiting (one per APP_POLL vendor seconds) plus
    the result fetch."""
    return math.ceil(max(0.0, wait_wall) * factor / APP_POLL) + 1


@dataclass
class Step:
    """What a running hybrid job waits for next."""

    record: JobRecord
    iteration: int  # 1-based task number
    arn: str = ""
    since: float = 0.0  # wall: waiting since


class App(threading.Thread):
    """The application of every hybrid job (and the reservation arm's scout). On alloc it
    starts the job (job-exec override), waits on its nodes for each task's result, works
    for its share of the classical run time after each, and finishes it. A chain's step
    (``record.step``) waits for its one task, works its slice, submits the next step
    (``step_spec`` builds its jobspec; filed in ``ledger``) and finishes. An adaptive
    step first plans what follows it as a loop's rank 0 does (``StepPlanner`` with the
    loop's time ``weight``, on this thread's own handle; the step's wall time limit from
    ``step_limit``): a keep holds its nodes (``holdings``)
    until its successor's result is there and works that iteration in place (the
    successor's job, waiting for this one, is cancelled unrun), or gives up at the
    plan's bound and finishes."""

    def __init__(
        self,
        arm: str,
        uri: str,
        vendor: Vendor,
        factor: float,
        units: dict[int, list[JobRecord]],
        shots: dict[int, int],
        ledger: Ledger,
        step_spec: Callable[..., Any],
        weight: float = 0.0,
        step_limit: Callable[[JobRecord], float] | None = None,  # wall seconds
    ) -> None:
        super().__init__(daemon=True)
        import flux

        self.arm, self.vendor, self.factor = arm, vendor, factor
        self.handle = flux.Flux(uri)  # this thread's own: a handle is not shared
        self.units, self.shots = units, shots
        self.ledger, self.step_spec = ledger, step_spec
        self.planner = StepPlanner(self.handle, weight, CORES_PER_NODE) if arm == ADAPTIVE else None
        self.step_limit = step_limit
        self.holdings: list[Holding] = []
        self.unforecast: list[JobRecord] = []  # steps whose service forecast is not read
        self.forecasts_due = 0.0
        self.inbox: queue.Queue[tuple[JobRecord, float]] = queue.Queue()
        self.waiting: list[Step] = []
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.tasks: dict[str, str] = {}  # client token -> task
        self.scouted: dict[int, str] = {}  # reservation arm: unit -> task, not yet released
        self.stop_flag = threading.Event()
        self.errors: list[str] = []

    # the journal thread calls this
    def allocated(self, record: JobRecord, t: float) -> None:
        self.inbox.put((record, t))

    def scout(self, unit: int) -> None:
        """Reservation arm: the unit's jobs are all submitted; submit its task now."""
        first = self.units[unit][0]
        self.scouted[unit] = self._task(f"scout-{unit}-1", first)
        for record in self.units[unit]:
            record.task = self.scouted[unit]

    def run(self) -> None:
        from flux_quantum.instance.plugin import PluginClient

        plugin = PluginClient(self.handle)
        while not self.stop_flag.is_set():
            now = time.time()
            try:
                while True:
                    record, t = self.inbox.get_nowait()
                    self._start(record, t)
            except queue.Empty:
                pass
            while self.timers and self.timers[0][0] <= now:
                _, _, action = heapq.heappop(self.timers)
                action()
            for step in list(self.waiting):
                ended = self.vendor.ended(step.arn)
                if ended is not None:
                    self.waiting.remove(step)
                    self._result(step, ended)
            if self.planner is not None:
                self._check_holdings(now)
                self._read_forecasts(now)
            for unit, arn in list(self.scouted.items()):
                if self.vendor.at_front(arn):
                    ids = [r.jobid for r in self.units[unit]]
                    try:
                        plugin.release(ids, task=arn, device=self.units[unit][0].device)
                    except Exception:  # not yet in DEPEND: try again next round
                        continue
                    created = self.vendor.created(arn)
                    self.units[unit][0].app_calls += app_polls(time.time() - created, self.factor)
                    del self.scouted[unit]
            self.stop_flag.wait(0.02)

    def _later(self, when: float, action: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, action))

    def _task(self, token: str, record: JobRecord) -> str:
        if token not in self.tasks:
            self.tasks[token] = self.vendor.create(
                DEVICES[record.device], token, self.shots[record.unit]
            )
            record.app_calls += 1
        return self.tasks[token]

    def _start(self, record: JobRecord, t_alloc: float) -> None:
        for _ in range(100):
            try:
                self.handle.rpc(
                    "job-exec.override", {"jobid": record.jobid, "event": "start"}
                ).get()
                break
            except OSError as exc:
                if "not found" not in str(exc).lower():
                    self.errors.append(f"start {record.jobid}: {exc}")
                    return
                time.sleep(0.01)
        if self.arm == "ungated":
            arn = self._task(f"ungated-{record.unit}-1", record)
            record.task = arn
        else:
            arn = record.task
        if not arn:
            self.errors.append(f"job {record.jobid}: no task at alloc")
            return
        self.waiting.append(Step(record, record.step or 1, arn, t_alloc))

    def _result(self, step: Step, ended: float) -> None:
        record = step.record
        now = time.time()
        t_ready = max(ended, step.since)
        if t_ready > step.since:
            record.idle.append((step.since, t_ready, step.iteration))
        record.app_calls += app_polls(t_ready - step.since, self.factor)
        record.t_result = t_ready
        record.results.append((step.iteration, ended, now))
        record.current, record.last_task_job = step.iteration, record.jobid
        slice_wall = record.runtime / record.iterations / self.factor
        record.work.append((now, now + slice_wall))
        if record.step and step.iteration < record.iterations:
            self._later(now + slice_wall, lambda: self._next_step(record))
        elif step.iteration < record.iterations:
            nxt = step.iteration + 1

            def next_task() -> None:
                token = f"{self.arm}-{record.unit}-{record.index}-{nxt}"
                try:
                    arn = self._task(token, record)
                except Exception as exc:
                    self.errors.append(f"job {record.jobid}: create: {exc}")
                    return
                self.waiting.append(Step(record, nxt, arn, time.time()))

            self._later(now + slice_wall, next_task)
        else:
            self._later(now + slice_wall, lambda: self._finish(record))

    def _next_step(self, record: JobRecord) -> None:
        """The end of a chain's step: submit the next step (held until its task is
        done), then finish this one. An adaptive step plans first, and a keep holds
        its nodes instead of finishing (``_check_holdings``)."""
        import flux.job

        k = (record.current or record.step) + 1
        now = time.time()
        plan = None
        if self.planner is not None and self.step_limit is not None:
            work = record.runtime / record.iterations / self.factor
            plan = self.planner.plan(
                record.jobid,
                record.last_task_job or record.jobid,
                record.nodes,
                self.step_limit(record),
                work,
                now,
                self._turnaround(record.index),
            )
        keep = plan is not None and plan.action is StepAction.KEEP
        try:
            spec = self.step_spec(record, k, after=record.jobid if keep else None)
            jobid = int(flux.job.submit(self.handle, spec))
        except Exception as exc:
            self.errors.append(f"job {record.jobid}: submit step {k}: {exc}")
        else:
            nxt = JobRecord(
                record.index,
                "hybrid",
                record.nodes,
                record.runtime,
                jobid=jobid,
                unit=record.unit,
                pattern=record.pattern,
                device=record.device,
                iterations=record.iterations,
                step=k,
            )
            if plan is not None:
                limit = self.step_limit(record) if self.step_limit else None
                nxt.plan = {**plan.to_dict(), "t": now, "limit": limit}
                self.unforecast.append(nxt)
            early = self.ledger.add(nxt)
            if "alloc" in early:  # the journal saw it before the record was filed
                self.inbox.put((nxt, nxt.events["alloc"]))
            if keep:
                assert plan is not None
                hold = Hold(plan, record.jobid, jobid, now)
                self.holdings.append(Holding(record, nxt, hold))
                return
        self._finish(record)

    def _turnaround(self, index: int) -> float:
        """The quickest a released step of loop ``index`` went to running (wall s)."""
        with self.ledger.lock:
            steps = [r for r in self.ledger.by_id.values() if r.index == index and r.step]
        return min(
            (
                r.events["start"] - max(r.events["qpu-release"], r.events.get("depend", 0.0))
                for r in steps
                if "start" in r.events and "qpu-release" in r.events
            ),
            default=0.0,
        )

    def _check_holdings(self, now: float) -> None:
        """The steps keeping their nodes: the successor's result there (its job
        released and its task ended), run the iteration in place; past the bound (or
        the service's forecast says it will be), give up and finish."""
        import flux.job

        for holding in list(self.holdings):
            host, carrier = holding.host, holding.carrier
            ended = None
            if "qpu-release" in carrier.events and carrier.task:
                ended = self.vendor.ended(carrier.task)
            ready = ended is not None and ended <= now
            gone = bool(carrier.exception) or "clean" in carrier.events
            if not ready and not gone and now - holding.checked >= HOLD_CHECK:
                holding.checked = now
                assert self.planner is not None
                holding.vendor_left = self.planner.vendor_left(carrier.jobid)
            outcome = holding.hold.check(now, result_ready=ready, vendor_left=holding.vendor_left)
            if outcome.state is HoldState.HOLDING and not gone:
                continue
            self.holdings.remove(holding)
            since, k = holding.hold.since, carrier.step
            state = outcome.state.value if not gone else HoldState.GAVE_UP.value
            carrier.hold = (since, now, state)
            host.idle.append((since, now, k))
            if outcome.state is not HoldState.IN_PLACE or gone:
                self._finish(host)
                continue
            # The iteration runs here: its own job never will.
            try:
                flux.job.cancel(self.handle, carrier.jobid, "ran in place")
            except OSError as exc:
                self.errors.append(f"cancel {carrier.jobid}: {exc}")
            carrier.ran_in = host.jobid
            assert ended is not None
            host.app_calls += app_polls(now - since, self.factor)
            host.t_result = now
            host.results.append((k, ended, now))
            host.current, host.last_task_job = k, carrier.jobid
            slice_wall = host.runtime / host.iterations / self.factor
            host.work.append((now, now + slice_wall))
            if k < host.iterations:
                self._later(now + slice_wall, lambda h=host: self._next_step(h))
            else:
                self._later(now + slice_wall, lambda h=host: self._finish(h))

    def _read_forecasts(self, now: float) -> None:
        """The service's first expected wait for each new step's task (its memo)."""
        if now < self.forecasts_due or not self.unforecast:
            return
        self.forecasts_due = now + HOLD_CHECK
        assert self.planner is not None
        for record in list(self.unforecast):
            if "qpu-release" in record.events or record.exception:
                self.unforecast.remove(record)
            elif "qpu-task" in record.events:
                wait = self.planner.vendor_left(record.jobid)
                if wait is not None:
                    record.service_wait = (now, wait)
                    self.unforecast.remove(record)

    def _finish(self, record: JobRecord) -> None:
        try:
            self.handle.rpc(
                "job-exec.override", {"jobid": record.jobid, "event": "finish", "status": 0}
            ).get()
        except OSError as exc:  # killed at its time limit meanwhile: its exception says so
            if "not found" not in str(exc).lower():
                self.errors.append(f"finish {record.jobid}: {exc}")

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=10)
        now = time.time()
        for step in self.waiting:  # still waiting at the end: idle so far
            step.record.idle.append((step.since, now, step.iteration))
        self.waiting = []
