"""What the handler service's parts tell the site's monitoring: the hooks, none by default.

``Meters`` is the shape the parts call at the few moments a metric needs (a vendor
object made, a task ended, a unit ended, a tick) and ``NoMeters`` the default that does
nothing, so a service without ``[quantum.metrics]`` imports no metrics library and pays
one empty call per hook. The implementation that keeps Prometheus metrics lives in
``flux_quantum.metrics`` and is given to ``QuantumService`` at construction. The hooks
run on the reactor thread and must never block, raise or keep a reference to a job's
user or task beyond what they count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from flux_quantum.service.state import Attempt, Unit, UnitState
    from flux_quantum.vendors.base import Vendor


class Meters(Protocol):
    """The moments the metrics hear of (reactor thread)."""

    def vendor(self, name: str, vendor: Vendor) -> Vendor:
        """The vendor object the service will call: returned as is, or wrapped to time
        and count its calls (the calls run in worker threads)."""
        ...

    def task_ended(self, attempt: Attempt, outcome: str) -> None:
        """The service stopped tracking ``attempt``'s task for ``outcome`` (a fail-over's
        reason); the tasks of a unit that ended are told by ``unit_ended``."""
        ...

    def unit_ended(self, unit: Unit, state: UnitState) -> None:
        """The unit was released, failed or abandoned (its jobs left, ``Units.end``)."""
        ...

    def tick(self, service: Any, now: float) -> None:
        """Once per tick, after the parts ran: a consistent snapshot of the service's
        state may be published here for the exporter's thread."""
        ...


class NoMeters:
    """No metrics: every hook does nothing."""

    def vendor(self, name: str, vendor: Vendor) -> Vendor:
        return vendor

    def task_ended(self, attempt: Attempt, outcome: str) -> None:
        return None

    def unit_ended(self, unit: Unit, state: UnitState) -> None:
        return None

    def tick(self, service: Any, now: float) -> None:
        return None
