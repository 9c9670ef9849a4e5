"""Flux tier: QPU vertices in a real Fluxion graph, allocated to released jobs."""

from __future__ import annotations

import json
import socket
import time

import pytest
from fluxinstance import FluxInstance, quantum_config

from flux_quantum.catalog import parse_catalog
from flux_quantum.instance import graph
from flux_quantum.instance.plugin import PluginClient

pytestmark = pytest.mark.flux

CATALOG = """
devices:
  - name: one
    vendor: local
    id: arn:aws:braket:::device/quantum-simulator/amazon/sv1
    class: simulator
    qubits: 34
    price: {per_minute: 0.075, min_seconds: 3}
    slots: 1
    properties: {noise: true}
  - name: two
    vendor: local
    id: arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1
    class: qpu
    qubits: 36
    price: {per_task: 0.30, per_shot: 0.08}
    slots: 2
"""
SLOT_PATHS = ["/cluster0/qpu-one/qpu0", "/cluster0/qpu-two/qpu0", "/cluster0/qpu-two/qpu1"]


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("catalog") / "backends.yaml"
    path.write_text(CATALOG)
    return path


@pytest.fixture(scope="module")
def inst(tmp_path_factory, catalog_file):
    instance = FluxInstance(tmp_path_factory.mktemp("flux"), size=2).start()
    instance.quantum("graph", "load", str(catalog_file))
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture(scope="module")
def handle(inst):
    import flux

    return flux.Flux(inst.uri)


def find_qpu_paths(inst: FluxInstance, criteria: str = "property=qpu") -> list[str]:
    out = inst.run(["flux", "ion-resource", "find", "--format=jgf", criteria]).stdout
    document = json.loads(out.strip().splitlines()[-1])
    nodes = document["graph"]["nodes"] if document else []
    return sorted(
        n["metadata"]["paths"]["containment"] for n in nodes if n["metadata"]["type"] == "qpu"
    )


def held(inst: FluxInstance, device: str, *command: str) -> str:
    jobid = inst.submit(f"--setattr=qpu={device}", *command)
    inst.wait_event(jobid, "dependency-add")
    return jobid


def release_for(inst: FluxInstance, handle, jobid: str, device: str) -> None:
    """What the handler service does at the release point."""
    jobspec = json.loads(inst.run(["flux", "job", "info", jobid, "jobspec"]).stdout)
    resources = graph.qpu_resources(jobspec["resources"], device)
    numeric = int(inst.run(["flux", "job", "id", "--to=dec", jobid]).stdout)
    PluginClient(handle).release(numeric, task=f"task-{jobid}", device=device, resources=resources)


def qpu_paths_in_R(inst: FluxInstance, jobid: str) -> list[str]:
    R = json.loads(inst.run(["flux", "job", "info", jobid, "R"]).stdout)
    nodes = R["scheduling"]["graph"]["nodes"]
    return sorted(
        n["metadata"]["paths"]["containment"] for n in nodes if n["metadata"]["type"] == "qpu"
    )


def event_times(inst: FluxInstance, jobid: str) -> dict[str, float]:
    return {e["name"]: e["timestamp"] for e in inst.eventlog(jobid)}


def test_load_puts_one_vertex_per_slot_in_ion_resource_find(inst):
    assert find_qpu_paths(inst) == SLOT_PATHS
    out = inst.run(["flux", "ion-resource", "find", "--format=jgf", "property=qpu"]).stdout
    vertices = {
        n["metadata"]["paths"]["containment"]: n["metadata"]
        for n in json.loads(out.strip().splitlines()[-1])["graph"]["nodes"]
    }
    device = vertices["/cluster0/qpu-one"]
    assert device["type"] == "qpu-one"
    props = vertices["/cluster0/qpu-one/qpu0"]["properties"]
    assert props["qpu"] == "one" and props["qubits"] == "34" and props["noise"] == "true"


def test_loading_twice_does_not_duplicate(inst, catalog_file):
    out = inst.quantum("graph", "load", str(catalog_file)).stdout
    assert "0 vertices added, 5 already present" in out
    assert find_qpu_paths(inst) == SLOT_PATHS
    rows = inst.quantum("graph", "list", "-n", "-o", "{device} {slot} {status} {alloc}").stdout
    assert rows.splitlines() == ["one 0 up free", "two 0 up free", "two 1 up free"]


def test_released_job_is_allocated_a_vertex_of_its_device(inst, handle):
    node_form = held(inst, "two", "-N1", "true")
    slot_form = held(inst, "two", "-n1", "true")
    for jobid in (node_form, slot_form):
        release_for(inst, handle, jobid, "two")
        inst.wait_event(jobid, "clean")
        assert inst.run(["flux", "jobs", "-n", "-o", "{result}", jobid]).stdout.strip() == (
            "COMPLETED"
        )
        paths = qpu_paths_in_R(inst, jobid)
        assert len(paths) == 1 and paths[0].startswith("/cluster0/qpu-two/")


def test_one_slot_device_holds_one_job_at_a_time(inst, handle):
    # Each job runs until the test has looked (a fixed sleep could end first on a busy
    # machine), then the others run one after the other.
    stop = inst.workdir / "stop-one-slot"
    wait = f"while [ ! -e {stop} ]; do sleep 0.1; done"
    jobs = [held(inst, "one", "sh", "-c", wait) for _ in range(3)]
    for jobid in jobs:
        release_for(inst, handle, jobid, "one")
    inst.wait_event(jobs[0], "start")
    assert [inst.state(j) for j in jobs[1:]] == ["SCHED", "SCHED"]
    assert "allocated" in inst.quantum("graph", "list", "-n", "-o", "{device} {alloc}").stdout
    stop.touch()
    for jobid in jobs:
        inst.wait_event(jobid, "clean")
    spans = sorted((event_times(inst, j)["alloc"], event_times(inst, j)["free"]) for j in jobs)
    for (_, freed), (allocated, _) in zip(spans, spans[1:], strict=False):
        assert freed <= allocated, f"two jobs held the one vertex at once: {spans}"
    assert all(qpu_paths_in_R(inst, j) == ["/cluster0/qpu-one/qpu0"] for j in jobs)


def test_device_down_holds_jobs_until_it_is_up_again(inst, handle):
    out = inst.quantum("graph", "status", "two", "down").stdout
    assert "3 vertices marked down" in out
    assert find_qpu_paths(inst, "property=qpu and status=down") == SLOT_PATHS[1:]
    jobid = held(inst, "two", "true")
    release_for(inst, handle, jobid, "two")
    time.sleep(1.5)
    assert inst.state(jobid) == "SCHED"
    graph.set_device_status(handle, "two", up=True)
    inst.wait_event(jobid, "clean")
    assert find_qpu_paths(inst, "property=qpu and status=down") == []


def test_satisfiability_check_before_release(inst, handle):
    jobspec = json.loads(inst.run(["flux", "submit", "--dry-run", "-n1", "true"]).stdout)
    jobspec["resources"] = graph.qpu_resources(jobspec["resources"], "two")
    graph.check_satisfiable(handle, jobspec)
    unknown = dict(jobspec, resources=graph.qpu_resources(jobspec["resources"], "absent"))
    with pytest.raises(graph.GraphError, match="is every device it names loaded"):
        graph.check_satisfiable(handle, unknown)
    huge = json.loads(inst.run(["flux", "submit", "--dry-run", "-N64", "true"]).stdout)
    huge["resources"] = graph.qpu_resources(huge["resources"], "two")
    with pytest.raises(graph.GraphError, match="can never satisfy"):
        graph.check_satisfiable(handle, huge)


def test_status_of_a_device_not_in_the_graph_is_an_error(inst):
    proc = inst.quantum("graph", "status", "absent", "down", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("flux-quantum: ERROR: device 'absent' has no vertices")


def test_static_jgf_loads_and_is_allocated(tmp_path, catalog_file):
    catalog = parse_catalog(catalog_file.read_text(), str(catalog_file))
    # Every broker of a test instance runs on this host, as `flux R encode` would list it.
    host = socket.gethostname()
    R = graph.nodes_R(f"{host},{host}", "0")
    (tmp_path / "R.json").write_text(json.dumps(R))
    static = FluxInstance(tmp_path / "gen", size=1)
    (tmp_path / "gen").mkdir()
    static.start()
    try:
        # the command as the README gives it, and Fluxion's own encoding of the same R
        static.quantum(
            "graph", "jgf", str(catalog_file), "--R", str(tmp_path / "R.json"), "-O", "graph.json"
        )
        encoded = json.loads(static.run(["flux", "ion-R", "encode"], input=json.dumps(R)).stdout)
    finally:
        static.stop()
    document = json.loads((tmp_path / "gen" / "graph.json").read_text())
    assert document == json.loads(json.dumps(graph.static_jgf(catalog, R)))
    ours = document["graph"]["nodes"][: len(encoded["scheduling"]["graph"]["nodes"])]
    assert ours == encoded["scheduling"]["graph"]["nodes"]

    config = quantum_config() + (
        "\n[resource]\n"
        f'path = "{tmp_path / "R.json"}"\n'
        f'scheduling = "{tmp_path / "gen" / "graph.json"}"\n'
    )
    (tmp_path / "run").mkdir()
    inst = FluxInstance(tmp_path / "run", size=2, config=config).start()
    try:
        import flux

        handle = flux.Flux(inst.uri)
        assert [v.path for v in graph.find_qpus(handle)] == SLOT_PATHS
        assert "0 vertices added" in inst.quantum("graph", "load", str(catalog_file)).stdout
        jobid = held(inst, "one", "-N2", "true")
        release_for(inst, handle, jobid, "one")
        inst.wait_event(jobid, "clean")
        assert qpu_paths_in_R(inst, jobid) == ["/cluster0/qpu-one/qpu0"]
        # a catalog that grew a slot and changed an attribute: load adds and refreshes
        grown = catalog_file.read_text().replace("qubits: 36", "qubits: 40")
        grown = grown.replace("slots: 2", "slots: 3")
        result = graph.load(handle, parse_catalog(grown))
        assert result.added == ("/cluster0/qpu-two/qpu2",)
        assert "/cluster0/qpu-two/qpu0" in result.updated
        two = [v for v in graph.find_qpus(handle) if v.device == "two"]
        assert [(v.slot, v.properties["qubits"]) for v in two] == [(0, "40"), (1, "40"), (2, "40")]
    finally:
        assert inst.stop() == 0, inst.broker_log()


def test_guest_cannot_change_the_graph(inst):
    guest = inst.guest_env(12345)
    proc = inst.quantum("graph", "status", "one", "down", check=False, env=guest)
    assert proc.returncode == 1
    assert "flux-quantum: ERROR:" in proc.stderr and "instance owner" in proc.stderr
    assert find_qpu_paths(inst, "property=qpu and status=down") == []


def test_backends_shows_graph_slots(inst, catalog_file):
    """`flux quantum backends` inside an instance shows each device's slot vertices."""
    res = inst.quantum("backends", "--catalog", str(catalog_file), "--timeout", "1", "--json")
    records = {r["name"]: r for r in json.loads(res.stdout)}
    for name, record in records.items():
        vertices = [p for p in find_qpu_paths(inst) if f"/qpu-{name}/" in p]
        assert vertices and record["graph"] is not None
        if record["graph"] != "down":
            free, total = record["graph"].split("/")
            assert int(total) == len(vertices) and 0 <= int(free) <= len(vertices)
    text = inst.quantum("backends", "--catalog", str(catalog_file), "--timeout", "1").stdout
    assert "GRAPH" in text.splitlines()[0]
