"""The emulator's sides as one table: a side declared in this file (its scenario, its routes,
its table entry, nothing else) served beside the package's, its calls, faults, bill and
environment in the emulator's report; how a route table matches a request; every side's
routes against the operations its scenario's faults may name; and the declared scenario
reads (defaults, checks, the errors they name)."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from flux_quantum.emulator import Emulator, ManualClock, ScenarioError
from flux_quantum.emulator.job_side import JobSide, SideJob
from flux_quantum.emulator.reading import Record, ScenarioFile, device_list, fault_list, setting
from flux_quantum.emulator.routes import Body, Route, RouteTable, SideRoute, owned
from flux_quantum.emulator.scenario import JobFault, QueueSpec
from flux_quantum.emulator.side import Missing, SideEntry, TableSide, serve
from flux_quantum.emulator.sides import SIDES
from flux_quantum.emulator.wire import Request, Response, json_response

# -- a side of the emulator declared here: the whole of what adding a vendor takes --------------

TOY_OPERATIONS = ("ListDevices", "CreateJob", "GetJob")


@dataclass(frozen=True)
class ToyDevice(Record):
    name: str
    qubits: int = 2
    queue: QueueSpec = QueueSpec(service_time=10.0)

    @property
    def queue_key(self) -> str:
        return f"toy:{self.name}"


@dataclass(frozen=True)
class ToyScenario(ScenarioFile):
    LABEL = "Toy"
    DEFAULT = {"devices": [{"name": "pebble"}]}

    devices: tuple[ToyDevice, ...] = device_list("device")
    token: str = "toy-token"
    price_per_second: float = 2.0
    faults: tuple[JobFault, ...] = fault_list(TOY_OPERATIONS, "CreateJob")
    source: str = "<dict>"


class ToyService(JobSide[ToyScenario, JobFault]):
    vendor = "toy"
    _draws = "toy-fault"
    _id_draws = "toy-ids"
    MISSING = Missing("no such path", "no device {name}", "no job {name}")
    ROUTES = (
        Route("GET", "/toy/devices", "ListDevices", "_devices"),
        Route("POST", "/toy/jobs", "CreateJob", "_create", device=Body("device"), creates=True),
        owned("GET", "/toy/jobs/<job>", "GetJob", "_get_job"),
    )

    def env(self, url: str) -> dict[str, str]:
        return {"TOY_URL": url + "/toy", "TOY_TOKEN": self.scenario.token}

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return Response(status, json.dumps({"oops": message}).encode(), error=f"toy{status}")

    def _authorize(self, route: SideRoute, request: Request) -> None:
        if request.headers.get("x-toy-token") != self.scenario.token:
            raise self._no_job("auth")  # any refusal will do for the toy

    def _device_doc(self, spec: ToyDevice, now: float) -> dict[str, Any]:
        return {"name": spec.name, "qubits": spec.qubits}

    def _create(
        self, route: SideRoute, request: Request, faults: list[JobFault]
    ) -> tuple[Response, str]:
        spec = self._spec(route.device)
        with self._lock:
            job = SideJob(self._new_id(), spec.name, self.clock.now(), 10)
            self._jobs[job.id] = job
            self._queues[spec.name].submit(job.id, job.created_t, job.shots)
        return json_response(200, {"id": job.id}), job.id

    def _document(self, job: SideJob, now: float) -> dict[str, Any]:
        return {"id": job.id, "state": self._queues[job.device].progress(job.id, now).status}


TOY = SideEntry(
    "toy", "toy", ("/toy",), serve(ToyService), ToyScenario, "toy", "--toy-scenario", "Toy",
    lambda s: len(s.devices),
)  # fmt: skip


def _call(emu: Emulator, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(emu.url + path, data=data, method=method)
    request.add_header("x-toy-token", "toy-token")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def toy_emulator(emulator_tier: None) -> Iterator[tuple[Emulator, ManualClock]]:
    clock = ManualClock()
    scenario = ToyScenario.from_dict(
        {"devices": [{"name": "pebble", "qubits": 3}],
         "faults": [{"operation": "CreateJob", "status": 503, "calls": [1]}]}
    )  # fmt: skip
    with Emulator(clock=clock, sides=(*SIDES, TOY), toy=scenario) as emu:
        yield emu, clock


def test_a_side_declared_in_one_place_is_served_billed_and_reported(
    toy_emulator: tuple[Emulator, ManualClock],
) -> None:
    emu, clock = toy_emulator
    assert _call(emu, "GET", "/toy/devices") == (200, [{"name": "pebble", "qubits": 3}])
    # Its scenario's fault: the first create is refused in the side's own error shape.
    assert _call(emu, "POST", "/toy/jobs", {"device": "pebble"}) == (
        503,
        {"oops": "Injected fault."},
    )
    status, made = _call(emu, "POST", "/toy/jobs", {"device": "pebble"})
    assert status == 200
    assert _call(emu, "GET", f"/toy/jobs/{made['id']}") == (
        200,
        {"id": made["id"], "state": "RUNNING"},
    )
    assert _call(emu, "GET", "/toy/jobs/nope") == (404, {"oops": "no job nope"})
    assert _call(emu, "GET", "/toy/elsewhere") == (404, {"oops": "no such path"})
    clock.advance(10)
    report = emu.report()
    [billed] = [t for t in report["bill"]["tasks"] if t["vendor"] == "toy"]
    assert (billed["id"], billed["state"], billed["cost"]) == (made["id"], "COMPLETED", 20.0)
    assert report["calls_by_vendor"]["toy"] == {"ListDevices": 1, "CreateJob": 2, "GetJob": 2,
                                                "Unknown": 1}  # fmt: skip
    assert report["faults"]["toy"] == {"error:503": 1}
    assert emu.env()["TOY_URL"] == emu.url + "/toy"
    assert emu.toy.job_ids("pebble") == [made["id"]]
    # Braket still answers every other path.
    assert emu.call_count("SearchDevices") == 0


def test_a_side_keyword_the_table_does_not_have_is_refused() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'toy'"):
        Emulator(clock=ManualClock(), toy=ToyScenario.default())


# -- route tables --------------------------------------------------------------------------------


class _Routes:
    def _device_of(self, kind: str, key: str) -> str | None:
        return {"j1": "dev-a"}.get(key)

    def handle(self, *args: Any) -> Response:
        return Response(200)


TABLE = RouteTable(
    (
        owned("POST", "/v/jobs/<job>/cancel", "Cancel", "handle"),
        Route("POST", "/v/jobs/<qc>/<kind>", "Submit", "handle", "<kind>", "<qc>", creates=True),
        Route("PUT", "/v/task/<arn*>/cancel", "CancelTask", "handle", "<arn>"),
        Route("GET", "/v/s3/<bucket>/<key*>", "GetObject", "handle", "s3://<bucket>/<key>"),
        Route("GET", "/v/devices", "List", "handle", device=Body("device")),
    )
)


def _resolve(method: str, path: str, body: bytes = b"") -> SideRoute | None:
    return TABLE.resolve(_Routes(), Request(method, path, {}, {}, body))


def test_a_route_table_matches_in_order_and_fills_targets_and_devices() -> None:
    cancel = _resolve("POST", "/v/jobs/j1/cancel")
    assert cancel is not None and (cancel.operation, cancel.target, cancel.device) == (
        "Cancel", "j1", "dev-a",
    )  # fmt: skip
    submit = _resolve("POST", "/v/jobs/garnet/circuit/")  # a trailing '/' is ignored
    assert submit is not None and (submit.operation, submit.target, submit.device) == (
        "Submit", "circuit", "garnet",
    )  # fmt: skip
    assert submit.creates and submit.fields == {"qc": "garnet", "kind": "circuit"}
    arn = "arn:aws:braket:us-east-1:1:quantum-task/abc"
    task = _resolve("PUT", f"/v/task/{arn}/cancel")  # an ARN's '/' left unencoded
    assert task is not None and task.target == arn
    encoded = _resolve("PUT", "/v/task/arn%3Aaws%2Fx/cancel")
    assert encoded is not None and encoded.target == "arn:aws/x"
    s3 = _resolve("GET", "/v/s3/bucket/a/b/results.json")
    assert s3 is not None and s3.target == "s3://bucket/a/b/results.json"
    listed = _resolve("GET", "/v/devices", b'{"device": "dev-b"}')
    assert listed is not None and listed.device == "dev-b"
    for method, path in [("GET", "/v/jobs/j1/cancel"), ("PUT", "/v/task/cancel"),
                         ("GET", "/v/s3/bucket"), ("GET", "/elsewhere")]:  # fmt: skip
        assert _resolve(method, path) is None, (method, path)


def test_a_route_table_names_only_handlers_its_side_has() -> None:
    with pytest.raises(TypeError, match="names no handler _nowhere"):

        class Broken(TableSide[Any, Any]):
            ROUTES = (Route("GET", "/x", "X", "_nowhere"),)

    with pytest.raises(ValueError, match="at most one <name\\*>"):
        Route("GET", "/x/<a*>/<b*>", "X", "h")


def test_every_side_routes_the_operations_its_faults_may_name() -> None:
    for entry in SIDES:
        if entry.scenario is None or entry.name == "braket":
            continue  # Braket's side and SQS route their own way (rest-json, X-Amz-Target)
        side = entry.build(entry.scenario.default(), _wiring())
        operations = sys.modules[entry.scenario.__module__].OPERATIONS
        assert side._table.operations() == set(operations), entry.name


def _wiring() -> Any:
    import threading

    from flux_quantum.emulator.side import Wiring

    return Wiring(ManualClock(), 0, threading.Event(), None, {})


# -- scenarios, read from their declarations --------------------------------------------------


def test_a_declared_scenario_reads_its_defaults_and_names_each_mistake() -> None:
    toy = ToyScenario.from_dict({"devices": [{"name": "a"}, {"name": "b", "qubits": 5}]})
    assert [(d.name, d.qubits, d.queue.service_time) for d in toy.devices] == [
        ("a", 2, 10.0), ("b", 5, 10.0),
    ]  # fmt: skip
    assert toy.specs == toy.devices and toy.price_per_second == 2.0 and toy.source == "<dict>"
    mistakes = [
        ({"devices": []}, "devices must list at least one device"),
        ({"devices": [{"name": "a"}, {"name": "a"}]}, "devices[1].name repeats device 'a'"),
        ({"devices": [{"name": ""}]}, "devices[0].name must be a non-empty string"),
        ({"devices": [{"name": "a", "qubits": 0}]}, "device 'a': qubits must be an integer >= 1"),
        ({"devices": [{"name": "a", "queue": {"depth": -1}}]}, "device 'a': queue.depth"),
        ({"devices": [{"name": "a", "colour": 1}]}, "devices[0].colour is unknown"),
        ({"devices": [{"name": "a"}], "price_per_second": -1}, "price_per_second must be >= 0"),
        ({"devices": [{"name": "a"}], "faults": [{"operation": "Nope", "status": 500}]},
         "faults[0].operation must be one of ListDevices"),
        ({"devices": [{"name": "a"}], "faults": [{"device": "b", "status": 500}]},
         "faults[0].device must be one of a"),
        ({"devices": [{"name": "a"}], "faults": [{"operation": "GetJob", "fail_job": "x"}]},
         "faults[0].operation must be CreateJob with fail_job"),
    ]  # fmt: skip
    for data, words in mistakes:
        with pytest.raises(ScenarioError) as raised:
            ToyScenario.from_dict(data)
        assert f"Toy scenario <dict>: {words}" in str(raised.value), (data, str(raised.value))


@dataclass(frozen=True)
class Pair(Record):
    name: str
    low: int = 1
    high: int = setting(2, low=1)

    def invalid(self) -> tuple[str, str] | None:
        return ("high", "must be above low") if self.high <= self.low else None


@dataclass(frozen=True)
class Pairs(ScenarioFile):
    LABEL = "Pairs"
    DEFAULT = {"pairs": [{"name": "p"}]}

    pairs: tuple[Pair, ...] = device_list("pair")
    faults: tuple[JobFault, ...] = fault_list(("X",), "X")
    source: str = "<dict>"


def test_a_record_refuses_what_its_fields_together_cannot_be() -> None:
    assert Pairs.default().pairs == (Pair("p"),)
    with pytest.raises(ScenarioError, match="pair 'p': high must be above low"):
        Pairs.from_dict({"pairs": [{"name": "p", "low": 3}]})
