"""A side whose jobs the emulator keeps itself: one queue per device, its jobs by id, its bill.

This module owns what the job-API sides (Felis, an IBM Quantum System, IonQ, IQM, OQTOPUS)
keep alike around their table of routes (``side.TableSide``): each device of the scenario
on the shared queue model (``queue.DeviceQueue``, by name), the jobs made so far (each a
``SideJob`` on one device), their ids drawn from the seed, the lookups a route makes (a
device by name, a job by id, a job's device) with the side's own refusals, the devices'
list and one device as the vendor's documents, a job as its ``_document``, and the bill:
each billable job's QPU seconds at the scenario's ``price_per_second`` (the
``timed_task`` rule). It must never know a vendor's routes, documents or errors (those
are each side's), never sleep holding the side's lock and never read the wall clock.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from flux_quantum.emulator.bill import BilledTask, SideBill, timed_task
from flux_quantum.emulator.queue import DeviceQueue
from flux_quantum.emulator.routes import SideRoute
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import FaultT, ScenarioT, TableSide
from flux_quantum.emulator.wire import Request, Response, json_response


@dataclass
class SideJob:
    """What every side knows of one of its jobs: its id, its device, when it was made and
    its shots; the bill names it by ``token`` (none by default) and leaves it off unless
    ``billable``."""

    id: str
    device: str
    created_t: float
    shots: int

    @property
    def token(self) -> str | None:
        return None

    @property
    def billable(self) -> bool:
        return True


class JobSide(TableSide[ScenarioT, FaultT]):
    """A table side whose jobs sit on its devices' queues (see the module docstring). The
    subclass names its ``vendor`` (the bill's) and the seed of its ids (``_id_draws``),
    and supplies ``_device_doc`` (a device as its API lists it) and ``_document`` (a job as its API answers it); it may change
    how a device queues (``_queue_spec``: paused or offline periods) and what a job costs
    (``_bill_row``)."""

    vendor: ClassVar[str] = ""
    _id_draws: ClassVar[str] = ""

    def _setup(self) -> None:
        seed = self.seed
        self._queues = {s.name: DeviceQueue(self._queue_spec(s), seed) for s in self._specs()}
        self._ids = random.Random(f"{seed}:{self._id_draws}")
        self._jobs: dict[str, Any] = {}

    def _specs(self) -> tuple[Any, ...]:
        specs: tuple[Any, ...] = getattr(self.scenario, "specs", ())
        return specs

    def _queue_spec(self, spec: Any) -> DeviceQueueSpec:
        """The shared queue model's view of a device: always up, unless the side says."""
        return DeviceQueueSpec.waiting_during(spec.queue_key, spec.name, spec.queue, [])

    # -- views for tests and the facade ---------------------------------------------------

    def job_ids(self, device: str | None = None) -> list[str]:
        """Every job made so far (on ``device``), oldest first."""
        with self._lock:
            return [j.id for j in self._jobs.values() if device in (None, j.device)]

    def bill(self) -> SideBill:
        """Every billable job so far: a completed one billed its QPU seconds."""
        with self._lock:
            now = self.clock.now()
            return SideBill([self._bill_row(j, now) for j in self._jobs.values() if j.billable])

    def _bill_row(self, job: Any, now: float) -> BilledTask:
        """A job on the bill at ``now``: its run seconds x ``price_per_second``. Lock held."""
        progress = self._queues[job.device].progress(job.id, now)
        price = getattr(self.scenario, "price_per_second", 0.0)
        return timed_task(self.vendor, job.id, job.device, job.token, job.shots, job.created_t,
                          progress, price)  # fmt: skip

    # -- lookups ----------------------------------------------------------------------------

    def _new_id(self) -> str:
        """A job's id: a UUID4 drawn from the seed. Lock held."""
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    def _device_of(self, kind: str, key: str) -> str | None:
        with self._lock:
            job = self._jobs.get(key)
        return job.device if job else None

    def _spec(self, name: str | None) -> Any:
        """The device ``name`` (the side's refusal if it has none)."""
        spec = next((s for s in self._specs() if s.name == name), None)
        if spec is None:
            raise self._no_device(name)
        return spec

    def _job(self, job_id: str | None) -> Any:
        """The job ``job_id`` (the side's refusal if it has none). Lock held."""
        job = self._jobs.get(job_id or "")
        if job is None or getattr(job, "deleted", False):
            raise self._no_job(job_id)
        return job

    # -- answers ----------------------------------------------------------------------------

    def _device_doc(self, spec: Any, now: float) -> Any:
        """The device as the vendor's API lists it at ``now``. Lock held."""
        raise NotImplementedError

    def _devices(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            now = self.clock.now()
            docs = [self._device_doc(spec, now) for spec in self._specs()]
        return json_response(200, docs)

    def _device(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        with self._lock:
            doc = self._device_doc(spec, self.clock.now())
        return json_response(200, doc)

    def _document(self, job: Any, now: float) -> dict[str, Any]:
        """The job as the vendor's API answers it at ``now``. Lock held."""
        raise NotImplementedError

    def _get_job(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            doc = self._document(self._job(route.target), self.clock.now())
        return json_response(200, doc)
