"""Unit tier: the JGF flux-quantum gives Fluxion, and the jobspec request a released job
carries (flux_quantum.instance.graph), without Flux."""

from __future__ import annotations

import json

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.cli.main import main
from flux_quantum.instance import graph

CATALOG = """
devices:
  - name: dev-a
    vendor: local
    id: arn:aws:braket:::device/quantum-simulator/amazon/sv1
    class: simulator
    qubits: 34
    price: {per_minute: 0.075, min_seconds: 3}
    properties: {drain_seconds_per_task: 2, vendor: not-the-vendor, noisy: true}
  - name: dev-b
    vendor: braket
    id: arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1
    class: qpu
    qubits: 36
    price: {per_task: 0.30, per_shot: 0.08}
    slots: 3
"""


@pytest.fixture
def catalog():
    return parse_catalog(CATALOG, "test.yaml")


def by_path(document):
    return {n["metadata"]["paths"]["containment"]: n for n in document["graph"]["nodes"]}


def edges(document):
    ids = {n["id"]: n["metadata"]["paths"]["containment"] for n in document["graph"]["nodes"]}
    return {(ids[e["source"]], ids[e["target"]]) for e in document["graph"]["edges"]}


# --- catalog_jgf -------------------------------------------------------------------------


def test_one_qpu_vertex_per_slot_under_a_device_vertex(catalog):
    document = graph.catalog_jgf(catalog)
    vertices = by_path(document)
    assert sorted(vertices) == [
        "/cluster0",
        "/cluster0/qpu-dev-a",
        "/cluster0/qpu-dev-a/qpu0",
        "/cluster0/qpu-dev-b",
        "/cluster0/qpu-dev-b/qpu0",
        "/cluster0/qpu-dev-b/qpu1",
        "/cluster0/qpu-dev-b/qpu2",
    ]
    assert vertices["/cluster0/qpu-dev-b"]["metadata"]["type"] == "qpu-dev-b"
    for slot in range(3):
        meta = vertices[f"/cluster0/qpu-dev-b/qpu{slot}"]["metadata"]
        assert (meta["type"], meta["id"], meta["rank"]) == ("qpu", slot, -1)
    assert edges(document) == {
        ("/cluster0", "/cluster0/qpu-dev-a"),
        ("/cluster0/qpu-dev-a", "/cluster0/qpu-dev-a/qpu0"),
        ("/cluster0", "/cluster0/qpu-dev-b"),
        *{("/cluster0/qpu-dev-b", f"/cluster0/qpu-dev-b/qpu{i}") for i in range(3)},
    }


def test_root_vertex_is_included_with_the_cluster_path(catalog):
    root = by_path(graph.catalog_jgf(catalog))["/cluster0"]["metadata"]
    assert (root["type"], root["rank"], root["id"]) == ("cluster", -1, 0)


def test_properties_are_strings_with_every_device_attribute(catalog):
    vertices = by_path(graph.catalog_jgf(catalog))
    for path in ("/cluster0/qpu-dev-a", "/cluster0/qpu-dev-a/qpu0"):
        props = vertices[path]["metadata"]["properties"]
        assert all(isinstance(v, str) for v in props.values())
        assert props["qpu"] == props["name"] == "dev-a"
        assert props["vendor"] == "local"  # the catalog field wins over a free property
        assert props["id"] == "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
        assert props["class"] == "simulator"
        assert props["qubits"] == "34"
        assert props["region"] == "us-east-1"
        assert props["price"] == "$0.075/min (min 3s)"
        assert props["slots"] == "1"
        assert props["drain_seconds_per_task"] == "2"
        assert props["noisy"] == "true"


def test_ids_are_unique_and_follow_first_id(catalog):
    document = graph.catalog_jgf(catalog, first_id=40)
    ids = [n["id"] for n in document["graph"]["nodes"]]
    assert len(ids) == len(set(ids))
    assert sorted(int(i) for i in ids[1:]) == list(range(40, 46))
    for node in document["graph"]["nodes"]:
        assert node["metadata"]["uniq_id"] == int(node["id"])


def test_custom_root_sets_paths_and_parent(catalog):
    root = graph.GraphRoot(path="/tioga0", uniq_id=7)
    document = graph.catalog_jgf(catalog, root=root, first_id=100)
    assert "/tioga0/qpu-dev-b/qpu2" in by_path(document)
    assert ("/tioga0", "/tioga0/qpu-dev-a") in edges(document)
    assert document["graph"]["nodes"][0]["id"] == "7"


def test_root_from_a_live_jgf_node():
    node = {
        "id": "0",
        "metadata": {"type": "cluster", "id": 0, "rank": -1, "paths": {"containment": "/c0"}},
    }
    assert graph.GraphRoot.from_jgf_node(node) == graph.GraphRoot(path="/c0", uniq_id=0)


# --- qpu_resources -----------------------------------------------------------------------

NODE_FORM = [
    {
        "type": "node",
        "count": 2,
        "exclusive": True,
        "with": [
            {"type": "slot", "count": 1, "label": "task", "with": [{"type": "core", "count": 1}]}
        ],
    }
]
SLOT_FORM = [{"type": "slot", "count": 2, "label": "task", "with": [{"type": "core", "count": 1}]}]


def qpu_request(name, count=1):
    return {
        "type": f"qpu-{name}",
        "count": 1,
        "with": [{"type": "qpu", "count": count, "exclusive": True}],
    }


def test_node_form_gets_the_device_request_as_a_sibling():
    assert graph.qpu_resources(NODE_FORM, "dev-b") == [*NODE_FORM, qpu_request("dev-b")]


def test_slot_form_is_nested_in_one_node():
    assert graph.qpu_resources(SLOT_FORM, "dev-a") == [
        {"type": "node", "count": 1, "with": SLOT_FORM},
        qpu_request("dev-a"),
    ]


def test_device_record_and_several_devices(catalog):
    resources = graph.qpu_resources(NODE_FORM, [catalog.get("dev-a"), "dev-b", "dev-a"])
    assert resources[1:] == [qpu_request("dev-a", 2), qpu_request("dev-b")]


def test_rewriting_twice_replaces_the_earlier_request():
    once = graph.qpu_resources(SLOT_FORM, "dev-a")
    assert graph.qpu_resources(once, "dev-b") == [once[0], qpu_request("dev-b")]


def test_input_is_not_modified():
    before = json.dumps(SLOT_FORM)
    graph.qpu_resources(SLOT_FORM, "dev-a")[0]["with"][0]["count"] = 99
    assert json.dumps(SLOT_FORM) == before


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ([], "ask for a core"),
        ([{"type": "qpu", "count": 1}], "ask for a core"),
        ([{"type": "core", "count": 1}], "top-level type 'core' is not supported"),
        ([*SLOT_FORM, *NODE_FORM], "mix top-level node and slot"),
    ],
)
def test_requests_that_cannot_hold_a_qpu_are_refused(resources, message):
    with pytest.raises(graph.GraphError, match=message):
        graph.qpu_resources(resources, "dev-a")


def test_no_device_is_refused():
    with pytest.raises(graph.GraphError, match="no device"):
        graph.qpu_resources(NODE_FORM, [])


# --- static JGF --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node[0-2]", ["node0", "node1", "node2"]),
        ("n[08-10],login", ["n08", "n09", "n10", "login"]),
        ("a[1,3]-ib", ["a1-ib", "a3-ib"]),
        ("vm,vm", ["vm", "vm"]),
    ],
)
def test_expand_hostlist(text, hosts):
    assert graph.expand_hostlist(text) == hosts


def test_expand_idset_and_errors():
    assert graph.expand_idset("0-2,5") == [0, 1, 2, 5]
    with pytest.raises(graph.GraphError, match="invalid idset"):
        graph.expand_idset("3-1")
    with pytest.raises(graph.GraphError, match="invalid hostlist"):
        graph.expand_hostlist("n[a-b]")


def test_static_jgf_has_nodes_like_flux_ion_R_encode_plus_qpus(catalog):
    R = graph.nodes_R("node[0-1]", "0-1", gpus="0")
    R["execution"]["properties"] = {"batch": "1"}
    document = graph.static_jgf(catalog, R)
    vertices = by_path(document)
    assert vertices["/cluster0"]["id"] == "0"
    node1 = vertices["/cluster0/node1"]["metadata"]
    assert node1 == {
        "type": "node",
        "name": "node1",
        "rank": 1,
        "paths": {"containment": "/cluster0/node1"},
        "properties": {"batch": ""},
    }
    assert vertices["/cluster0/node0/core1"]["metadata"]["rank"] == 0
    assert vertices["/cluster0/node1/gpu0"]["metadata"]["type"] == "gpu"
    assert ("/cluster0/node1", "/cluster0/node1/core0") in edges(document)
    assert "/cluster0/qpu-dev-b/qpu2" in vertices
    ids = [int(n["id"]) for n in document["graph"]["nodes"]]
    assert ids == list(range(len(ids)))  # nodes first, qpus after, no gaps or clashes


def test_static_jgf_keeps_an_existing_scheduling_graph(catalog):
    R = graph.nodes_R("n0", "0")
    R["scheduling"] = graph.static_jgf([], R)
    R["scheduling"]["graph"]["nodes"][0]["metadata"]["paths"]["containment"] = "/big0"
    for node in R["scheduling"]["graph"]["nodes"][1:]:
        path = node["metadata"]["paths"]["containment"]
        node["metadata"]["paths"]["containment"] = path.replace("/cluster0", "/big0")
    vertices = by_path(graph.static_jgf(catalog, R))
    assert {"/big0", "/big0/n0", "/big0/n0/core0", "/big0/qpu-dev-a/qpu0"} <= set(vertices)
    assert vertices["/big0/qpu-dev-a"]["id"] == "3"


def test_R_without_execution_is_refused(catalog):
    with pytest.raises(graph.GraphError, match="execution.R_lite"):
        graph.static_jgf(catalog, {"version": 1})


# --- CLI (no instance needed) ------------------------------------------------------------


def test_cli_jgf_prints_the_qpu_subgraph(tmp_path, capsys, catalog):
    path = tmp_path / "backends.yaml"
    path.write_text(CATALOG)
    assert main(["graph", "jgf", str(path)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == json.loads(json.dumps(graph.catalog_jgf(catalog)))


def test_cli_jgf_with_nodes_writes_a_file(tmp_path, capsys):
    path = tmp_path / "backends.yaml"
    path.write_text(CATALOG)
    out = tmp_path / "graph.json"
    assert (
        main(["graph", "jgf", str(path), "--nodes", "n[0-3]", "--cores", "0-7", "-O", str(out)])
        == 0
    )
    vertices = by_path(json.loads(out.read_text()))
    assert "/cluster0/n3/core7" in vertices and "/cluster0/qpu-dev-b/qpu0" in vertices


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "n0"], "--nodes needs --cores"),
        (["--cores", "0"], "--cores and --gpus go with --nodes"),
        (["--R", "/nonexistent/R.json"], "--R /nonexistent/R.json"),
        (["--nodes", "n[x]", "--cores", "0"], "invalid hostlist"),
    ],
)
def test_cli_jgf_errors(tmp_path, capsys, argv, message):
    path = tmp_path / "backends.yaml"
    path.write_text(CATALOG)
    assert main(["graph", "jgf", str(path), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flux-quantum: ERROR: ") and message in err


def test_cli_bad_catalog_is_an_error(tmp_path, capsys):
    path = tmp_path / "backends.yaml"
    path.write_text("devices: []\n")
    assert main(["graph", "jgf", str(path)]) == 1
    assert "devices must be a non-empty list" in capsys.readouterr().err
