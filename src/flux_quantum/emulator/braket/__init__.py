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

from flux_quantum.emulator.braket.direct import RESERVATIONS_PATH, book, book_wall
from flux_quantum.emulator.braket.scenario import DeviceSpec, Fault, ReservationSpec, Scenario
from flux_quantum.emulator.braket.service import BraketService

__all__ = [
    "RESERVATIONS_PATH",
    "BraketService",
    "DeviceSpec",
    "Fault",
    "ReservationSpec",
    "Scenario",
    "book",
    "book_wall",
]
