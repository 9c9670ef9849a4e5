"""The emulated Amazon Braket side: its REST API, its S3 results, Braket Direct reservations.

This package owns everything the emulator answers for Braket and S3 clients:
``service`` routes each request and injects the scenario's faults; ``quantum_tasks``
answers CreateQuantumTask, GetQuantumTask, CancelQuantumTask and SearchQuantumTasks
(``task_record``: a task's facts; ``program_sets``: a program set's checks; ``search``:
filters and pages); ``devices`` answers GetDevice and SearchDevices and keeps each
device's queue (``capabilities``: its capabilities document); ``task_tags`` the tag
operations; ``reservations`` the Braket Direct bookings and ``direct`` the emulator's own
booking route and clients; ``result_files`` writes each task's results into the in-memory
``s3``; ``scenario`` reads the Braket scenario; ``wire`` has Braket's error and timestamp
shapes. What every side shares (the queue, the clock, the server, the bill) is the
emulator package's. It must never import another vendor's side.
"""

from typing import Any

from flux_quantum.emulator.braket.direct import RESERVATIONS_PATH, book, book_wall
from flux_quantum.emulator.braket.scenario import DeviceSpec, Fault, ReservationSpec, Scenario
from flux_quantum.emulator.braket.service import BraketService
from flux_quantum.emulator.side import SideEntry, Wiring, serve
from flux_quantum.emulator.sqs import PREFIX as SQS_PREFIX
from flux_quantum.emulator.sqs import SqsService


def _events(scenario: Any, wiring: Wiring) -> SqsService:
    """SQS beside Braket (under /sqs): the queue Braket's events go to, as a site's
    EventBridge rule sends them; a long poll there sees what changed while it waited."""
    braket = wiring.sides["braket"]
    assert isinstance(braket, BraketService)
    sqs = SqsService(
        wiring.clock, braket.scenario.account, wiring.seed, wiring.stop, wiring.on_call,
        before_receive=braket.publish_events,
    )  # fmt: skip
    braket.publish_to(sqs.add_queue(braket.scenario.events.queue))
    return sqs


# Amazon Braket's API (and the S3 it writes results to, under /s3) on every path no other
# side takes, and the SQS queue its events go to.
SIDE = SideEntry(
    "braket", "braket", (), serve(BraketService), Scenario, "scenario", "--scenario", "Braket",
    lambda s: len(s.devices),
)  # fmt: skip
EVENTS = SideEntry("sqs", "sqs", (SQS_PREFIX,), _events, faults=False)

__all__ = [
    "EVENTS",
    "RESERVATIONS_PATH",
    "SIDE",
    "BraketService",
    "DeviceSpec",
    "Fault",
    "ReservationSpec",
    "Scenario",
    "book",
    "book_wall",
]
