"""An attempt's calls to the outside world: in workers, and what a failed one means.

``AttemptCalls`` runs an attempt's blocking call (a program read, a probe, a create, a
poll) in a worker and hands the answer back on the reactor only if it still matters: a
task created, or a session opened, for an attempt gone meanwhile is cancelled or closed
by the parts given at construction. A failed call goes through the service's one
``RetryPolicy``: a retryable vendor error (throttling, an outage) is retried as long as
it lasts, anything else (a refused call, a bug, a broken setup) at most ``error_limit``
times in a row before the unit fails with the error's text; the first failure of a run
is told (a ``qpu-retry`` event, a warning), the next ones only logged at debug level.
A wait that is no failure (no device answered, every slot busy) is retried the same way
and told once per reason (``qpu-wait``). Why the attempt waits stays in its memo until
a call succeeds. This part never chooses, creates or releases anything.
"""

from __future__ import annotations

import syslog
from collections.abc import Callable, Sequence
from typing import Any

from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol import events
from flux_quantum.service.cancels import Cancels
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.lookups import Lookups
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.state import Attempt, Program, Unit
from flux_quantum.service.workers import Submit, Workers
from flux_quantum.vendors.base import SessionOpening, TaskRef, VendorSession
from flux_quantum.vendors.errors import VendorError

Handler = Callable[[Unit, Program, Attempt, Any, BaseException | None], None]


class AttemptCalls:
    def __init__(
        self,
        ctx: ServiceContext,
        workers: Workers,
        outcomes: Outcomes,
        cancels: Cancels,
        lookups: Lookups,
        *,
        orphan: Callable[[VendorSession, str], None],
    ) -> None:
        self.ctx = ctx
        self._workers = workers
        self.outcomes = outcomes
        self.cancels = cancels
        self.lookups = lookups
        self._orphan = orphan
        self._completed: list[tuple[Unit, Program]] = []

    # -- calls

    def call(
        self,
        unit: Unit,
        program: Program,
        call: Callable[[], Any],
        handler: Handler,
        *,
        lane: Submit | None = None,
    ) -> None:
        """Run ``call`` in a worker (of ``lane``: the compile stage's own); ``handler``
        gets its answer on the reactor only if the attempt is still the program's
        current one and its unit is still active."""
        attempt = program.attempt
        attempt.busy = True

        def done(result: Any, error: BaseException | None) -> None:
            attempt.busy = attempt.creating = False
            self._completed.append((unit, program))
            if not unit.active or program.attempt is not attempt:
                if isinstance(result, TaskRef):
                    self._stray([attempt], result)
                elif isinstance(result, SessionOpening) and result.session is not None:
                    self._orphan(result.session, "its jobs are gone")
                return
            handler(unit, program, attempt, result, error)

        (lane or self._workers.submit)(call, done)

    def call_many(
        self,
        members: Sequence[tuple[Unit, Program]],
        call: Callable[[], Any],
        handler: Callable[[list[tuple[Unit, Program]], Any, BaseException | None], None],
    ) -> None:
        """``call`` on behalf of several attempts at once (a merged task's create): each
        is busy until it answers; ``handler`` gets the members whose attempt is still
        current and whose unit is still active; a task created for members left meanwhile
        is theirs to settle, and cancelled when none is left."""
        attempts = [(unit, program, program.attempt) for unit, program in members]
        for _, _, attempt in attempts:
            attempt.busy = True

        def done(result: Any, error: BaseException | None) -> None:
            alive, gone = [], []
            for unit, program, attempt in attempts:
                attempt.busy = attempt.creating = False
                self._completed.append((unit, program))
                if unit.active and program.attempt is attempt:
                    alive.append((unit, program))
                else:
                    gone.append(attempt)
            if alive:
                handler(alive, result, error)
            if gone and isinstance(result, TaskRef):
                # After the handler: the members still waiting ride the task, so it is
                # left running for them.
                self._stray(gone, result)

        self._workers.submit(call, done)

    def _stray(self, attempts: list[Attempt], task: TaskRef) -> None:
        """A task created for attempts left meanwhile: theirs to settle (``Lookups``
        waited for this answer), cancelled unless another unit rides it."""
        if not self.lookups.created_late(attempts, task):
            self.cancels.cancel(task, "its jobs are gone")

    def completed(self, unit: Unit, program: Program) -> None:
        """A call made for the attempt elsewhere (a merged task's shared poll) ended:
        its next step may be due now."""
        self._completed.append((unit, program))

    def take_completed(self) -> list[tuple[Unit, Program]]:
        """The attempts whose call completed since the last take (their next step may
        be due now)."""
        done, self._completed = self._completed, []
        return done

    def vendor(self, unit: Unit, program: Program, name: str, operation: str) -> Any:
        """The vendor object, or None after routing the failure (unknown vendor: fail;
        anything else, e.g. a broken profile: the bounded retry)."""
        try:
            return self.ctx.vendor(name)
        except (ValueError, FluxQuantumError) as exc:
            self.outcomes.fail_unit(unit, f"qpu: cannot reach vendor {name}: {exc}")
        except Exception as exc:
            self.failed(unit, program, operation, exc)
        return None

    # -- what a failure means

    def failed(self, unit: Unit, program: Program, operation: str, error: BaseException) -> None:
        """A call failed: retry it after the policy's back-off, or fail the unit with the
        error's text once the policy gives up."""
        ctx = self.ctx
        attempt = program.attempt
        decision = ctx.retry.failed_call(attempt.retry, error)
        attempt.due = ctx.clock() + decision.delay
        if isinstance(error, VendorError):
            ctx.counters.vendor_errors += 1
            code, text = error.vendor_code, str(error)
        else:
            ctx.counters.unexpected_errors += 1
            code, text = type(error).__name__, f"{type(error).__name__}: {error}"
        if decision.give_up:
            ctx.note_error(f"unit {unit.id}: {operation}: {text}")
            self.outcomes.fail_unit(
                unit,
                f"qpu: {operation} failed {attempt.retry.other} times in a row, giving up: {text}",
            )
            return
        if decision.first:
            record = events.Retry(
                index=program.index,
                operation=operation,
                code=code,
                message=text,
                retry_in=round(decision.delay, 1),
                attempt=attempt.number,
            )
            ctx.post_all(unit, record)
        attempt.hold(f"{operation} failed ({code}: {text}); next try in {decision.delay:g}s")
        # Said once per attempt and run of failures, not at every retry.
        level = syslog.LOG_WARNING if decision.first else syslog.LOG_DEBUG
        ctx.log(level, f"unit {unit.id}: {operation}: {text}; retry in {decision.delay:g}s")

    def wait(self, unit: Unit, program: Program, reason: str) -> None:
        """No way on for now, for a reason that passes by itself: try again later, and
        say so once per reason."""
        attempt = program.attempt
        decision = self.ctx.retry.waiting(attempt.retry)
        if attempt.wait_posted != reason:
            attempt.wait_posted = reason
            record = events.Wait(
                index=program.index, reason=reason, retry_in=round(decision.delay, 1)
            )
            self.ctx.post_all(unit, record)
        attempt.due = self.ctx.clock() + decision.delay
        attempt.hold(f"{reason}; next try in {decision.delay:g}s")

    @staticmethod
    def recovered(attempt: Attempt) -> None:
        """A call succeeded: the next failure starts a new run."""
        attempt.retry.clear()
