"""The qpu handler service: find held qpu jobs, run their producer quantum tasks, release
them in time.

For every job the ``quantum`` jobtap plugin holds, the service chooses a device (policy),
records an idempotency token in the job's eventlog, creates the vendor task, watches its
queue (one poll per task, however many jobs ride it), keeps volatile memos on every
waiting job, and releases the jobs through the plugin at the release point, or fails them
over / fails them with the vendor's reason. It rebuilds everything it needs from the
eventlogs (``flux_quantum.protocol.events``) after a crash or restart, so it keeps no state of its
own on disk.

It runs as a process in the interpreter flux-quantum was installed into, never inside
the broker's Python: the broker module ``qpu_handlers.py`` (standard library only) only
supervises that process. Where each concern lives:

==================  ===============================================================
``qpu_handlers.py``  the broker-side supervisor: start, restart, stop, relay status
``runner.py``        the service process: connect, register, serve status, run
``core.py``          ``QuantumService``: the parts below, driven by ``tick()``
``due.py``           the queue of what is due when, which drives the steps
``adoption.py``      discovery of held jobs, adoption, recovery from eventlogs
``submission.py``    an attempt's program read, reservation, session, merged set, create
``tracking.py``      an attempt's task tracked: polls, queue milestones, ``max_wait``
``selection.py``     choosing a device for an attempt, and the explanation
``programs.py``      reading a job's program file (as the job's user may)
``attempts.py``      an attempt's calls in workers; what a failed one means
``retry.py``         the one retry policy: back-off, limits, what is said once
``outcomes.py``      fail-over, fail, finish, cancel
``release.py``       the release rule's facts, its answer (``timing``) acted on; the release
``devices.py``       device status, and the Fluxion graph following it
``sessions.py``      vendor sessions: recorded, kept while a job may use them, closed
``charges.py``       the site policy: access, reserve before create, settle at the end
``reservations.py``  reserved QPU time (Braket Direct): who waits, who is in, the guard
``face.py``          what users see: memos and status
``meters.py``        the hooks the site's metrics hear (none by default: ``NoMeters``)
``taskread.py``      a released job's task read through the service, once per task
``state.py``         the records: units, programs, attempts (phases), members; their
                    changes mark what the face shows (``Changes``)
``units.py``         the tracked units and their indexes, kept in step
``context.py``       what the parts share: the outside world, the units, the counters
``fluxside.py``      everything asked of Flux (``FluxJobs``), and its records
``workers.py``       worker threads for blocking calls
``options.py``       ``ServiceOptions``
==================  ===============================================================

Threads: all state lives on the reactor thread; vendor I/O and program-file reads run in
worker threads, which hand results back through a pipe the reactor watches. The service
must never call a vendor or read a user's file on the reactor thread, never touch a Flux
handle from a worker, never let an exception escape into the reactor, and never create a
second task for a recorded token.
"""

from flux_quantum.service.core import QuantumService
from flux_quantum.service.fluxside import ClusterView, FluxJobs, JobRecord, JobSize, jobspec_size
from flux_quantum.service.options import ServiceError, ServiceOptions
from flux_quantum.service.programs import DEFAULT_PROGRAM, ProgramError, read_program
from flux_quantum.service.release import StartupMeter
from flux_quantum.service.runner import ServiceRunner, service_name
from flux_quantum.service.selection import compact_explanation
from flux_quantum.service.workers import VendorWorkers

__all__ = [
    "DEFAULT_PROGRAM",
    "ClusterView",
    "FluxJobs",
    "JobRecord",
    "JobSize",
    "ProgramError",
    "QuantumService",
    "ServiceError",
    "ServiceOptions",
    "ServiceRunner",
    "StartupMeter",
    "VendorWorkers",
    "compact_explanation",
    "jobspec_size",
    "read_program",
    "service_name",
]
