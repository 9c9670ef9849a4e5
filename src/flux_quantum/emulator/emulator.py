"""The ``Emulator`` facade: one loopback server speaking Braket, S3, SQS, IBM Quantum (its cloud
and an on-premises IBM Quantum System), IQM, Pasqal, Alice & Bob's Felis, OQTOPUS and IonQ, one
call log.

This module owns the lifecycle of an emulator (start, stop, context manager), the environment
a client needs to reach it, read access to its call log, and its report (the bill, calls and
faults: ``report()``, also served at ``GET /_emulator/report``, a route of the emulator's own
that needs no credential), and booking Braket Direct reservations while it runs
(``add_reservation``, also ``POST /_emulator/reservations``, beside the report, which also
takes a window on the wall clock and gives a reservation without one its ARN). Braket's
task and device events go to an SQS queue it serves under ``/sqs`` (the scenario's
``events.queue``), as a site's EventBridge rule would send them. It must
never bind anything but IPv4 loopback, never leave a
thread running after ``stop()``, never put a credential in a report, and never change what
the scenario describes: everything it serves comes from the scenario, the clock and the seed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from flux_quantum.emulator.bill import REPORT_PATH, report_document
from flux_quantum.emulator.braket import BraketService, ReservationSpec, Scenario
from flux_quantum.emulator.braket.account import (
    ECR_PREFIX,
    IAM_PREFIX,
    PRICES_PATH,
    STS_PREFIX,
    AwsAccount,
)
from flux_quantum.emulator.braket.direct import (
    RESERVATIONS_PATH,
    on_timeline,
    reservation_document,
)
from flux_quantum.emulator.braket.s3 import PREFIX as S3_PREFIX
from flux_quantum.emulator.clock import Clock, WallClock
from flux_quantum.emulator.felis import PREFIX as FELIS_PREFIX
from flux_quantum.emulator.felis import FelisScenario, FelisService
from flux_quantum.emulator.ibm import API as IBM_API
from flux_quantum.emulator.ibm import PREFIX as IBM_PREFIX
from flux_quantum.emulator.ibm import IbmScenario, IbmService
from flux_quantum.emulator.ibm.cloud import CLOUD_URL, IbmCloud, cloud_service
from flux_quantum.emulator.ibm.cloud import DEFAULT_CRN as IBM_CLOUD_CRN
from flux_quantum.emulator.ibmqs import PREFIX as IBM_QS_PREFIX
from flux_quantum.emulator.ibmqs import IbmQsScenario, IbmQsService
from flux_quantum.emulator.ionq import PREFIX as IONQ_PREFIX
from flux_quantum.emulator.ionq import IonqScenario, IonqService
from flux_quantum.emulator.iqm import PREFIX as IQM_PREFIX
from flux_quantum.emulator.iqm import IqmScenario, IqmService
from flux_quantum.emulator.oqtopus import PREFIX as OQTOPUS_PREFIX
from flux_quantum.emulator.oqtopus import OqtopusScenario, OqtopusService
from flux_quantum.emulator.pasqal import LOCAL_PREFIX as PASQAL_LOCAL_PREFIX
from flux_quantum.emulator.pasqal import PREFIX as PASQAL_PREFIX
from flux_quantum.emulator.pasqal import PasqalScenario, PasqalService
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.scenario import ScenarioError
from flux_quantum.emulator.server import HttpServer, check_loopback
from flux_quantum.emulator.side import Call
from flux_quantum.emulator.simulation_pool import shared_pool
from flux_quantum.emulator.sqs import PREFIX as SQS_PREFIX
from flux_quantum.emulator.sqs import SqsService
from flux_quantum.emulator.wire import Request, Response, json_response

ACCESS_KEY = "flux-quantum-emulator"
SECRET_KEY = "flux-quantum-emulator-secret"
IBM_APIKEY = "flux-quantum-emulator"
IBM_CRN = IBM_CLOUD_CRN


class Emulator:
    """A local Amazon Braket (and S3) endpoint for the unmodified SDK and boto3.

    >>> with Emulator(clock=ManualClock()) as emu:
    ...     os.environ.update(emu.env())
    ...     AwsDevice("arn:aws:braket:::device/quantum-simulator/amazon/sv1").queue_depth()
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        on_call: Callable[[Call], None] | None = None,
        ibm: IbmScenario | None = None,
        iqm: IqmScenario | None = None,
        pasqal: PasqalScenario | None = None,
        ibm_qs: IbmQsScenario | None = None,
        felis: FelisScenario | None = None,
        oqtopus: OqtopusScenario | None = None,
        ionq: IonqScenario | None = None,
    ) -> None:
        self.host = check_loopback(host)
        self.port = port
        self.scenario = scenario or Scenario.default()
        self.clock = clock or WallClock()
        self.seed = seed
        self._stop = threading.Event()
        self._service = BraketService(self.scenario, self.clock, seed, self._stop, on_call)
        # The account around Braket: STS, IAM's jobs role and Braket's price list.
        self.account = AwsAccount(self.scenario)
        # SQS beside Braket (under /sqs): the queue Braket's events go to, as a site's
        # EventBridge rule sends them; a long poll there sees what changed while it waits.
        self.sqs = SqsService(
            self.clock,
            self.scenario.account,
            seed,
            self._stop,
            on_call,
            before_receive=self._service.publish_events,
        )
        self._service.publish_to(self.sqs.add_queue(self.scenario.events.queue))
        # IBM Quantum beside Braket, on the same port under /ibm (see the ibm package).
        self.ibm_scenario = ibm or IbmScenario.default()
        self.ibm = IbmService(self.ibm_scenario, self.clock, seed, self._stop, on_call)
        # IBM Cloud's hosts around it (IAM, Global Search and Catalog, the Runtime API), as
        # qiskit-ibm-runtime reaches them through the emulator as its HTTP proxy.
        self.ibm_cloud = IbmCloud(self.ibm, self.ibm_scenario)
        # IQM (under /iqm) and Pasqal (/pasqal, its on-premises warden /pasqal-local), as
        # QRMI reaches them (see the iqm and pasqal packages).
        self.iqm = IqmService(iqm or IqmScenario.default(), self.clock, seed, self._stop, on_call)
        self.pasqal = PasqalService(
            pasqal or PasqalScenario.default(), self.clock, seed, self._stop, on_call
        )
        # An on-premises IBM Quantum System (under /ibm-qs: its API, IAM and S3 bucket), as
        # QRMI's IBMQuantumSystem resource reaches it (see the ibmqs package).
        self.ibm_qs = IbmQsService(
            ibm_qs or IbmQsScenario.default(), self.clock, seed, self._stop, on_call
        )
        # Alice & Bob's Felis (under /felis), as QRMI's AliceBobFelis resource reaches it.
        self.felis = FelisService(
            felis or FelisScenario.default(), self.clock, seed, self._stop, on_call
        )
        # OQTOPUS Cloud's User API (under /oqtopus), as the oqtopus-client SDK reaches it.
        self.oqtopus = OqtopusService(
            oqtopus or OqtopusScenario.default(), self.clock, seed, self._stop, on_call
        )
        # IonQ (under /ionq), as its own client ionq-core reaches it.
        self.ionq = IonqService(
            ionq or IonqScenario.default(), self.clock, seed, self._stop, on_call
        )
        self._server: HttpServer | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Bind and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError("the emulator is already started")
        self._stop.clear()
        self._server = HttpServer(self.host, self.port, self._handle)
        self._server.start()
        # The simulation workers import the simulator while the emulator serves, so that
        # the first task's result does not wait for them.
        shared_pool().prestart()
        return self

    def _handle(self, request: Request) -> Response:
        if cloud_service(request.headers.get("host")) is not None:
            return self.ibm_cloud.handle(request)
        if request.path == REPORT_PATH and request.method in ("GET", "HEAD"):
            return json_response(200, self.report())
        if request.path == RESERVATIONS_PATH and request.method == "POST":
            return self._book(request)
        if request.path == PRICES_PATH and request.method in ("GET", "HEAD"):
            return self.account.prices()
        if _under(request.path, STS_PREFIX):
            return self.account.sts(request)
        if _under(request.path, IAM_PREFIX):
            return self.account.iam(request)
        if _under(request.path, ECR_PREFIX):
            return self.account.ecr(request)
        if _under(request.path, SQS_PREFIX):
            return self.sqs.handle(request)
        if _under(request.path, IBM_PREFIX):
            return self.ibm.handle(request)
        if _under(request.path, IQM_PREFIX):
            return self.iqm.handle(request)
        if _under(request.path, IBM_QS_PREFIX):
            return self.ibm_qs.handle(request)
        if _under(request.path, FELIS_PREFIX):
            return self.felis.handle(request)
        if _under(request.path, OQTOPUS_PREFIX):
            return self.oqtopus.handle(request)
        if _under(request.path, IONQ_PREFIX):
            return self.ionq.handle(request)
        if _under(request.path, PASQAL_PREFIX) or _under(request.path, PASQAL_LOCAL_PREFIX):
            return self.pasqal.handle(request)
        return self._service.handle(request)

    def _book(self, request: Request) -> Response:
        """``POST /_emulator/reservations``: 201 and the reservation's record, or 400 and
        the one-sentence reason it was refused. The window may be given on the wall clock
        (``wall_start``, ``wall_end``) and the ARN left to the emulator."""
        try:
            fields = json.loads(request.body or b"null")
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            return json_response(400, {"message": "reservation: the body must be a JSON object"})
        try:
            reservation = self._service.add_reservation(on_timeline(fields, self.clock))
        except ScenarioError as exc:
            return json_response(400, {"message": str(exc)})
        return json_response(201, reservation_document(reservation, self.clock))

    def stop(self) -> None:
        """Close every connection and join every thread (bounded); safe to call twice."""
        self._stop.set()  # wakes requests sleeping on a "slow response" fault
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        self._service.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the Braket endpoint; S3 lives under ``/s3``)."""
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        host, port = self._server.address
        return f"http://{host}:{port}"

    @property
    def s3_url(self) -> str:
        return self.url + S3_PREFIX

    @property
    def bucket(self) -> str:
        return self.scenario.bucket

    @property
    def sqs_url(self) -> str:
        """Where boto3's SQS client reaches the emulator (``AWS_ENDPOINT_URL_SQS``)."""
        return self.url + SQS_PREFIX

    @property
    def events_queue(self) -> str:
        """The name of the queue Braket's events go to (the scenario's ``events.queue``)."""
        return self.scenario.events.queue

    @property
    def events_queue_url(self) -> str:
        """That queue's URL, as GetQueueUrl gives it."""
        return self.sqs.queue_url(self.url, self.events_queue)

    def env(self) -> dict[str, str]:
        """The environment that points the Braket SDK, boto3 and botocore at this emulator.

        ``AWS_ENDPOINT_URL_BRAKET`` applies to every region, so regional device ARNs and
        ``AwsQuantumTask(arn)`` in any region reach the emulator too.
        """
        return {
            "AWS_ENDPOINT_URL_BRAKET": self.url,
            "BRAKET_ENDPOINT": self.url,
            "AWS_ENDPOINT_URL_S3": self.s3_url,
            "AWS_ENDPOINT_URL_SQS": self.sqs_url,
            "AWS_ENDPOINT_URL_STS": self.url + STS_PREFIX,
            "AWS_ENDPOINT_URL_IAM": self.url + IAM_PREFIX,
            "AWS_ENDPOINT_URL_ECR": self.url + ECR_PREFIX,
            # The SDK's cost tracker reads Braket's prices from here.
            "BRAKET_PRICE_OFFERS_URL": self.url + PRICES_PATH,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": self.scenario.region,
            "AMZN_BRAKET_OUT_S3_BUCKET": self.scenario.bucket,
            # No instance-metadata lookups: there is nothing but loopback to ask.
            "AWS_EC2_METADATA_DISABLED": "true",
            # Where flux-quantum's own `local` vendor finds this emulator.
            "FLUX_QUANTUM_EMULATOR_URL": self.url,
            **self.ibm_env(),
            **self.iqm.env(self.url),
            **self.pasqal.env(self.url),
            **self.ibm_qs.env(self.url),
            **self.felis.env(self.url),
            **self.oqtopus.env(self.url),
            **self.ionq.env(self.url),
        }

    def ibm_env(self) -> dict[str, str]:
        """QRMI's settings for each emulated IBM backend (``<backend>_QRMI_IBM_QCS_*``, as
        qrmi reads them), plus the same without a prefix (flux-quantum's default for any
        backend)."""
        settings = {
            "QRMI_IBM_QCS_ENDPOINT": self.url + IBM_API,
            "QRMI_IBM_QCS_IAM_ENDPOINT": self.url + IBM_PREFIX,
            "QRMI_IBM_QCS_IAM_APIKEY": self.ibm_scenario.apikey or IBM_APIKEY,
            "QRMI_IBM_QCS_SERVICE_CRN": self.ibm_scenario.crn or IBM_CRN,
        }
        env = dict(settings)
        for backend in self.ibm_scenario.backends:
            env.update({f"{backend.name}_{key}": value for key, value in settings.items()})
        # qiskit-ibm-runtime's own settings (it reads IAM_URL; the rest are what its
        # QiskitRuntimeService is given, with the emulator as its HTTP proxy: see
        # docs/vendors.md).
        env.update(
            {
                "QISKIT_IBM_CHANNEL": "ibm_quantum_platform",
                "QISKIT_IBM_URL": CLOUD_URL,
                "QISKIT_IBM_TOKEN": settings["QRMI_IBM_QCS_IAM_APIKEY"],
                "QISKIT_IBM_INSTANCE": settings["QRMI_IBM_QCS_SERVICE_CRN"],
                "IAM_URL": self.url + IBM_PREFIX,
            }
        )
        return env

    # -- what happened ------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every request answered so far, Braket's and IBM's, by emulated time (a copy)."""
        calls = [
            *self._service.calls,
            *self.sqs.calls,
            *self.ibm.calls,
            *self.iqm.calls,
            *self.pasqal.calls,
            *self.ibm_qs.calls,
            *self.felis.calls,
            *self.oqtopus.calls,
            *self.ionq.calls,
        ]
        return sorted(calls, key=lambda call: call.t)

    def call_count(self, operation: str | None = None, target: str | None = None) -> int:
        return sum(
            1
            for call in self.calls
            if (operation is None or call.operation == operation)
            and (target is None or call.target == target)
        )

    def clear_calls(self) -> None:
        self._service.clear_calls()
        self.sqs.clear_calls()
        self.ibm.clear_calls()
        self.iqm.clear_calls()
        self.pasqal.clear_calls()
        self.ibm_qs.clear_calls()
        self.felis.clear_calls()
        self.oqtopus.clear_calls()
        self.ionq.clear_calls()

    def device_arns(self) -> list[str]:
        return [spec.arn for spec in self.scenario.devices]

    def task_arns(self) -> list[str]:
        """Every quantum task created so far, oldest first."""
        return self._service.task_arns()

    def task_timeline(self, task_arn: str) -> TaskTimeline:
        """When a task was created, became next to run, started and ended (emulated
        seconds on this emulator's clock; see ``clock``)."""
        return self._service.task_timeline(task_arn)

    def hybrid_job_starts(self) -> dict[str, float]:
        """When each Braket hybrid job started, or will once its start-up is over
        (emulated seconds on this emulator's clock), by ARN."""
        return self._service.job_starts()

    def task_forecast(self, task_arn: str) -> TaskTimeline:
        """The milestones a task will reach if nothing but the background changes its
        device's queue from now on (no create or cancel, no new reservation): ``ended``
        when it will end, or ``cancelled`` when a reservation's end will cancel it."""
        return self._service.task_forecast(task_arn)

    # -- Braket Direct ------------------------------------------------------------------------

    def add_reservation(
        self, arn: str, device: str, start: float, end: float, price_per_hour: float = 0.0
    ) -> ReservationSpec:
        """Book ``device`` (a name or an ARN) for reservation ``arn`` during ``[start, end)``
        (emulated seconds on this emulator's clock; ``end`` after now); billed
        ``price_per_hour`` x its hours from now on. ScenarioError (a ValueError) in one
        sentence naming the field when refused (a bad ARN, unknown device, a window over
        another on the device). Thread-safe; also ``POST /_emulator/reservations``."""
        return self._service.add_reservation(
            {
                "arn": arn,
                "device": device,
                "start": start,
                "end": end,
                "price_per_hour": price_per_hour,
            }
        )

    def reservations(self) -> list[ReservationSpec]:
        """Every reservation booked (the scenario's and those added), by start."""
        return self._service.reservations()

    def report(self) -> dict[str, Any]:
        """The emulator's bill (every task and IBM session, what each vendor charges for
        it now), its calls by operation and the faults that fired, by kind, since it
        was made (``clear_calls`` does not reset them); JSON-able. See docs/emulator.md."""
        now = self.clock.now()
        braket_calls, braket_faults = self._service.counts()
        ibm_calls, ibm_faults = self.ibm.counts()
        ibm_tasks, ibm_sessions = self.ibm.bill()
        # A hybrid job is on the bill as a session: its instance time is its cost.
        sessions = [*ibm_sessions, *self._service.bill_jobs()]
        iqm_calls, iqm_faults = self.iqm.counts()
        pasqal_calls, pasqal_faults = self.pasqal.counts()
        qs_calls, qs_faults = self.ibm_qs.counts()
        felis_calls, felis_faults = self.felis.counts()
        oqtopus_calls, oqtopus_faults = self.oqtopus.counts()
        ionq_calls, ionq_faults = self.ionq.counts()
        sqs_calls, _ = self.sqs.counts()
        return report_document(
            tasks=[
                *self._service.bill(),
                *ibm_tasks,
                *self.iqm.bill()[0],
                *self.pasqal.bill()[0],
                *self.ibm_qs.bill(),
                *self.felis.bill(),
                *self.oqtopus.bill(),
                *self.ionq.bill(),
            ],
            sessions=sessions,
            calls={
                "braket": braket_calls,
                "ibm": ibm_calls,
                "iqm": iqm_calls,
                "pasqal": pasqal_calls,
                "ibm-quantum-system": qs_calls,
                "alice-bob-felis": felis_calls,
                "oqtopus": oqtopus_calls,
                "ionq": ionq_calls,
                "sqs": sqs_calls,
            },
            faults={
                "braket": braket_faults,
                "ibm": ibm_faults,
                "iqm": iqm_faults,
                "pasqal": pasqal_faults,
                "ibm-quantum-system": qs_faults,
                "alice-bob-felis": felis_faults,
                "oqtopus": oqtopus_faults,
                "ionq": ionq_faults,
            },
            now=now,
            reservations=self._service.bill_reservations(),
        )

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "stopped"
        return f"Emulator({where}, {len(self.scenario.devices)} devices, clock={self.clock!r})"


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")
