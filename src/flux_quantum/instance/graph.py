"""QPUs in the Fluxion resource graph: catalog devices as vertices that jobs allocate.

This module owns how a catalog device appears in Fluxion and how a job asks for it:
the JGF it adds (run time, ``sched-fluxion-resource.add_subgraph``) or writes (static,
``[resource] scheduling``), the vertex status that follows the vendor, and the jobspec
resources a released job must carry to be allocated a slot of its device. It runs as
the instance owner (every ``sched-fluxion-resource`` RPC is owner-only), never talks to
a vendor, never reads a credential and never decides when a job is released: that is
the handlers' job. Flux is only reached through a handle the caller passes in.

Shape (checked on flux-sched 0.54). Each device gets one *device vertex* of its own
type ``qpu-<name>`` (shared, never exclusive) under the cluster root, and below it one
``qpu`` *slot vertex* per catalog slot::

    /cluster0/qpu-sv1            type qpu-sv1   properties: qpu=sv1, vendor, qubits, ...
    /cluster0/qpu-sv1/qpu0       type qpu       (one per slot, allocated exclusively)
    /cluster0/qpu-sv1/qpu1       type qpu

Fluxion matches jobspec resources by *type* only (RFC 31 constraints look at nodes,
the jobspec ``id``/``name`` of a resource is ignored), so the per-device type is what
lets a job name its device; the ``qpu`` slot below it is what the job holds
exclusively, so at most ``slots`` jobs hold a device at once, and the allocation shows
in ``R.scheduling`` (``match-format = "rv1"``). See ``qpu_resources`` for the request.
"""

from __future__ import annotations

import copy
import errno
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flux_quantum.catalog import Catalog, Device
from flux_quantum.errors import FluxQuantumError

QPU_TYPE = "qpu"
DEVICE_TYPE_PREFIX = "qpu-"
# Property on every vertex flux-quantum adds; its value is the device name. It also
# makes ``find property=qpu`` return only our vertices (and their ancestors).
MARKER = "qpu"
SUBSYSTEM = "containment"
RESOURCE_SERVICE = "sched-fluxion-resource"
DEFAULT_ROOT_PATH = "/cluster0"
# First uniq_id of the QPU vertices when nothing better is known (an offline JGF
# without nodes); ``load`` uses the live graph's largest id + 1 instead.
DEFAULT_FIRST_ID = 1_000_000


class GraphError(FluxQuantumError):
    """Fluxion refused a graph operation, or a request cannot be expressed in the graph."""


# --- naming ---------------------------------------------------------------------------


def _device_name(device: str | Device) -> str:
    return device.name if isinstance(device, Device) else device


def device_type(device: str | Device) -> str:
    """The Fluxion resource type of a device's vertex: ``qpu-<name>``."""
    return DEVICE_TYPE_PREFIX + _device_name(device)


def device_path(device: str | Device, root: str = DEFAULT_ROOT_PATH) -> str:
    """Containment path of a device's vertex, e.g. ``/cluster0/qpu-sv1``."""
    return f"{root}/{device_type(device)}"


def slot_paths(device: Device, root: str = DEFAULT_ROOT_PATH) -> list[str]:
    """Containment paths of a device's ``qpu`` slot vertices."""
    return [f"{device_path(device, root)}/{QPU_TYPE}{i}" for i in range(device.slots)]


def device_properties(device: Device) -> dict[str, str]:
    """Vertex properties of a device: every value a string, as Fluxion requires.

    The catalog's free-form properties come first so that the catalog's own fields
    (name, vendor, ...) win a clash: a vertex must never disagree with its device.
    """
    props = {str(k): str(v) for k, v in device.properties.items()}
    props.update(
        {
            MARKER: device.name,
            "name": device.name,
            "vendor": device.vendor,
            "id": device.id,
            "class": device.device_class,
            "qubits": str(device.qubits),
            "region": device.region,
            "price": device.price.describe(),
            "slots": str(device.slots),
        }
    )
    return props


# --- JGF ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphRoot:
    """The cluster vertex QPU vertices hang under, as the live graph has it.

    add_subgraph attaches a JGF to the existing graph by matching vertices on
    containment path and rank, so the root must be repeated with exactly these.
    """

    path: str = DEFAULT_ROOT_PATH
    type: str = "cluster"
    id: int = 0
    rank: int = -1
    uniq_id: int = 0

    def vertex(self) -> dict[str, Any]:
        return {
            "id": str(self.uniq_id),
            "metadata": {
                "type": self.type,
                "basename": self.type,
                "name": self.path.rsplit("/", 1)[-1],
                "id": self.id,
                "uniq_id": self.uniq_id,
                "rank": self.rank,
                "exclusive": False,
                "size": 1,
                "paths": {SUBSYSTEM: self.path},
            },
        }

    @classmethod
    def from_jgf_node(cls, node: Mapping[str, Any]) -> GraphRoot:
        meta = node["metadata"]
        return cls(
            path=meta["paths"][SUBSYSTEM],
            type=meta.get("type", "cluster"),
            id=int(meta.get("id", 0)),
            rank=int(meta.get("rank", -1)),
            uniq_id=int(node["id"]),
        )


def _vertex(
    uniq_id: int,
    vtype: str,
    name: str,
    vid: int,
    path: str,
    properties: Mapping[str, str],
    *,
    basename: str | None = None,
    rank: int = -1,
    exclusive: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "type": vtype,
        "basename": basename or vtype,
        "name": name,
        "id": vid,
        "uniq_id": uniq_id,
        "rank": rank,
        "exclusive": exclusive,
        "size": 1,
        "paths": {SUBSYSTEM: path},
    }
    if properties:
        metadata["properties"] = dict(properties)
    return {"id": str(uniq_id), "metadata": metadata}


def _edge(source: int | str, target: int | str) -> dict[str, Any]:
    return {"source": str(source), "target": str(target), "metadata": {"subsystem": SUBSYSTEM}}


def _qpu_subgraph(
    devices: Iterable[Device], root: GraphRoot, first_id: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Vertices and edges of every device below ROOT (the root itself not included)."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    next_id = first_id
    for device in devices:
        props = device_properties(device)
        dtype = device_type(device)
        dev_id = next_id
        next_id += 1
        nodes.append(_vertex(dev_id, dtype, dtype, 0, device_path(device, root.path), props))
        edges.append(_edge(root.uniq_id, dev_id))
        for slot, path in enumerate(slot_paths(device, root.path)):
            nodes.append(_vertex(next_id, QPU_TYPE, f"{QPU_TYPE}{slot}", slot, path, props))
            edges.append(_edge(dev_id, next_id))
            next_id += 1
    return nodes, edges


def catalog_jgf(
    catalog: Catalog | Iterable[Device],
    root: GraphRoot | None = None,
    first_id: int = DEFAULT_FIRST_ID,
) -> dict[str, Any]:
    """JGF of the catalog's QPU vertices under ROOT, ready for add_subgraph.

    One ``qpu-<name>`` device vertex per device and one ``qpu`` slot vertex per slot,
    uniq ids counting up from FIRST_ID (they must not clash with the live graph's).
    """
    root = root or GraphRoot()
    nodes, edges = _qpu_subgraph(catalog, root, first_id)
    return {"graph": {"nodes": [root.vertex(), *nodes], "edges": edges}}


# --- static JGF for [resource] scheduling ---------------------------------------------

_HOST_TERM_RE = re.compile(r"^([^\[\]]*)(?:\[([^\[\]]+)\])?([^\[\]]*)$")


def expand_idset(text: str) -> list[int]:
    """RFC 22 idset (``0-3,7``) as a sorted list of ids."""
    ids: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise GraphError(f"invalid idset {text!r}: {part!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise GraphError(f"invalid idset {text!r}: bad range {part!r}")
        ids.update(range(first, last + 1))
    return sorted(ids)


def _split_hostlist(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms if t.strip()]


def expand_hostlist(text: str) -> list[str]:
    """RFC 29 hostlist (``node[0-3,7],login1``) in order, zero padding kept."""
    hosts: list[str] = []
    for term in _split_hostlist(text):
        match = _HOST_TERM_RE.match(term)
        if not match:
            raise GraphError(f"invalid hostlist {text!r}: cannot parse {term!r}")
        prefix, ranges, suffix = match.groups()
        if ranges is None:
            hosts.append(term)
            continue
        for part in ranges.split(","):
            lo, sep, hi = part.strip().partition("-")
            if not lo.isdigit() or (sep and not hi.isdigit()):
                raise GraphError(f"invalid hostlist {text!r}: bad range {part!r}")
            width = len(lo)
            for n in range(int(lo), int(hi if sep else lo) + 1):
                hosts.append(f"{prefix}{n:0{width}d}{suffix}")
    return hosts


def nodes_R(hosts: str, cores: str, gpus: str | None = None) -> dict[str, Any]:
    """An RFC 20 R for identical nodes, as ``flux R encode --hosts --cores`` writes it.

    Ranks are 0..N-1 in hostlist order, which is how a system instance numbers brokers
    listed in ``bootstrap.hosts`` in the same order.
    """
    hostnames = expand_hostlist(hosts)
    if not hostnames:
        raise GraphError("--nodes: the hostlist is empty")
    expand_idset(cores)  # validate now, with a message naming the option
    children = {"core": cores}
    if gpus:
        expand_idset(gpus)
        children["gpu"] = gpus
    ranks = f"0-{len(hostnames) - 1}" if len(hostnames) > 1 else "0"
    return {
        "version": 1,
        "execution": {
            "R_lite": [{"rank": ranks, "children": children}],
            "nodelist": [hosts],
            "starttime": 0.0,
            "expiration": 0.0,
        },
    }


def _nodes_from_R(R: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """JGF vertices of R's nodes, encoded exactly as Fluxion's own ``flux ion-R encode``
    (fluxion.resourcegraph.V1) does, so that a static graph is the one Fluxion expects:
    ``/cluster0/<host>/core<i>``, uniq ids in order from 0 (the cluster vertex)."""
    try:
        execution = R["execution"]
        r_lite = execution["R_lite"]
        nodelist = execution["nodelist"]
    except (KeyError, TypeError):
        raise GraphError("R must have execution.R_lite and execution.nodelist") from None
    hosts: list[str] = []
    for entry in nodelist:
        hosts.extend(expand_hostlist(entry))
    rank_index: dict[int, int] = {}
    for entry in r_lite:
        for rank in expand_idset(str(entry["rank"])):
            if rank in rank_index:
                raise GraphError(f"R_lite: rank {rank} is listed twice")
            rank_index[rank] = len(rank_index)
    rank_props: dict[int, dict[str, str]] = {}
    for prop, ranks in (execution.get("properties") or {}).items():
        for rank in expand_idset(ranks):
            rank_props.setdefault(rank, {})[prop] = ""

    root = GraphRoot()
    nodes = [
        {
            "id": "0",
            "metadata": {"type": "cluster", "paths": {SUBSYSTEM: root.path}},
        }
    ]
    edges: list[dict[str, Any]] = []
    next_id = 1
    for entry in r_lite:
        for rank in expand_idset(str(entry["rank"])):
            if rank_index[rank] >= len(hosts):
                raise GraphError(f"R nodelist has no host for rank {rank}")
            host = hosts[rank_index[rank]]
            node_path = f"{root.path}/{host}"
            meta: dict[str, Any] = {
                "type": "node",
                "name": host,
                "rank": rank,
                "paths": {SUBSYSTEM: node_path},
            }
            if rank in rank_props:
                meta["properties"] = rank_props[rank]
            node_id = next_id
            nodes.append({"id": str(node_id), "metadata": meta})
            edges.append({"source": "0", "target": str(node_id)})
            next_id += 1
            for ctype, ids in entry.get("children", {}).items():
                for i in expand_idset(str(ids)):
                    nodes.append(
                        {
                            "id": str(next_id),
                            "metadata": {
                                "type": ctype,
                                "id": i,
                                "rank": rank,
                                "paths": {SUBSYSTEM: f"{node_path}/{ctype}{i}"},
                            },
                        }
                    )
                    edges.append({"source": str(node_id), "target": str(next_id)})
                    next_id += 1
    return nodes, edges


def static_jgf(catalog: Catalog | Iterable[Device], R: Mapping[str, Any]) -> dict[str, Any]:
    """The complete JGF for ``[resource] scheduling``: R's nodes plus the QPU vertices.

    If R already carries a ``scheduling`` JGF (e.g. from ``flux ion-R encode``) its
    graph is kept as is and the QPU vertices are added under its root.
    """
    existing = R.get("scheduling")
    if existing:
        graph = existing.get("graph", {}) if isinstance(existing, Mapping) else {}
        nodes = copy.deepcopy(list(graph.get("nodes", [])))
        edges = copy.deepcopy(list(graph.get("edges", [])))
        root_node = _root_node(nodes)
        if root_node is None:
            raise GraphError("R.scheduling has no root vertex (a path like /cluster0)")
        root = GraphRoot.from_jgf_node(root_node)
    else:
        nodes, edges = _nodes_from_R(R)
        root = GraphRoot(uniq_id=0)
    first_id = _max_id(nodes) + 1
    qpu_nodes, qpu_edges = _qpu_subgraph(catalog, root, first_id)
    return {"graph": {"nodes": nodes + qpu_nodes, "edges": edges + qpu_edges}}


def _root_node(nodes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for node in nodes:
        path = node.get("metadata", {}).get("paths", {}).get(SUBSYSTEM, "")
        if path.count("/") == 1:
            return node
    return None


def _max_id(nodes: Iterable[Mapping[str, Any]]) -> int:
    best = -1
    for node in nodes:
        meta = node.get("metadata", {})
        for value in (node.get("id"), meta.get("uniq_id")):
            if value is None:
                continue
            try:
                best = max(best, int(value))
            except (TypeError, ValueError):
                continue
    return best


# --- the request a released job carries ------------------------------------------------


def _is_qpu_request(resource: Mapping[str, Any]) -> bool:
    rtype = str(resource.get("type", ""))
    return rtype == QPU_TYPE or rtype.startswith(DEVICE_TYPE_PREFIX)


def qpu_resources(
    resources: Sequence[Mapping[str, Any]],
    device: str | Device | Sequence[str | Device],
) -> list[dict[str, Any]]:
    """The job's jobspec ``resources`` with a slot of DEVICE added, for release.

    Appends, beside the job's own request, one sibling per device::

        {"type": "qpu-<name>", "count": 1,
         "with": [{"type": "qpu", "count": N, "exclusive": true}]}

    (N = how many times the device is named; a batch job may name several devices.)
    The slot must be exclusive: Fluxion 0.54 silently drops a non-exclusive one from
    the allocation. Fluxion rejects a top-level ``slot`` beside any other request
    ("siblings in jobspec request same resource type", the job is killed as
    unsatisfiable), so a slot-only request (``flux submit -n``) is nested in one node:
    ``[{node: 1 -> slot...}]``; its tasks then share a node, and a job whose slots do
    not fit on one node must be submitted with ``-N``. Earlier QPU requests are
    replaced, so calling this twice is harmless. The input is not modified.
    """
    devices = [device] if isinstance(device, str | Device) else list(device)
    if not devices:
        raise GraphError("qpu_resources: no device given")
    kept = [copy.deepcopy(dict(r)) for r in resources if not _is_qpu_request(r)]
    if not kept:
        raise GraphError(
            "jobspec resources ask for no node or slot; a job holding a QPU must also "
            "ask for a core"
        )
    types = [r.get("type") for r in kept]
    for rtype in types:
        if rtype not in ("node", "slot"):
            raise GraphError(
                f"jobspec resources: top-level type {rtype!r} is not supported "
                "(accepted: node, slot)"
            )
    if "slot" in types:
        if "node" in types:
            raise GraphError("jobspec resources mix top-level node and slot requests")
        kept = [{"type": "node", "count": 1, "with": kept}]
    counts: dict[str, int] = {}
    for item in devices:
        name = _device_name(item)
        counts[name] = counts.get(name, 0) + 1
    for name, count in counts.items():
        kept.append(
            {
                "type": device_type(name),
                "count": 1,
                "with": [{"type": QPU_TYPE, "count": count, "exclusive": True}],
            }
        )
    return kept


# --- live instance ----------------------------------------------------------------------


def _rpc(handle: Any, method: str, payload: Mapping[str, Any]) -> Any:
    topic = f"{RESOURCE_SERVICE}.{method}"
    try:
        return handle.rpc(topic, dict(payload)).get()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOSYS:
            raise GraphError(
                f"{topic}: no such service; QPU vertices need the Fluxion scheduler "
                "(sched-fluxion-resource) loaded in this instance"
            ) from None
        if exc.errno == errno.EPERM:
            raise GraphError(
                f"{topic}: only the instance owner may read or change the Fluxion graph"
            ) from None
        raise GraphError(f"{topic}: {reason}") from None


def _find(handle: Any, criteria: str) -> list[dict[str, Any]]:
    """JGF vertices matching CRITERIA (and their ancestors); empty if none."""
    resp = _rpc(handle, "find", {"criteria": criteria, "format": "jgf"})
    R = resp.get("R")
    if not R:
        return []
    if isinstance(R, str):
        R = json.loads(R)
    graph = R.get("graph", R.get("scheduling", {}).get("graph", {}))
    return list(graph.get("nodes", []))


def _path(node: Mapping[str, Any]) -> str:
    return str(node.get("metadata", {}).get("paths", {}).get(SUBSYSTEM, ""))


@dataclass(frozen=True)
class QpuVertex:
    """One ``qpu`` slot vertex of the live graph."""

    device: str
    slot: int
    path: str
    up: bool
    allocated: bool
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def status(self) -> str:
        return "up" if self.up else "down"

    @property
    def device_path(self) -> str:
        return self.path.rsplit("/", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "slot": self.slot,
            "path": self.path,
            "status": self.status,
            "allocated": self.allocated,
            "properties": dict(self.properties),
        }


def find_qpus(handle: Any) -> list[QpuVertex]:
    """Every ``qpu`` slot vertex in the instance's Fluxion graph, by device and slot."""
    slots = [
        n for n in _find(handle, f"property={MARKER}") if n["metadata"].get("type") == QPU_TYPE
    ]
    if not slots:
        return []
    down = {_path(n) for n in _find(handle, f"property={MARKER} and status=down")}
    busy = {_path(n) for n in _find(handle, f"property={MARKER} and sched-now=allocated")}
    vertices = []
    for node in slots:
        meta = node["metadata"]
        props = {str(k): str(v) for k, v in (meta.get("properties") or {}).items()}
        path = _path(node)
        vertices.append(
            QpuVertex(
                device=props.get(MARKER, ""),
                slot=int(meta.get("id", 0)),
                path=path,
                up=path not in down,
                allocated=path in busy,
                properties=MappingProxyType(props),
            )
        )
    return sorted(vertices, key=lambda v: (v.device, v.slot))


def instance_root(handle: Any) -> tuple[GraphRoot, int]:
    """The live graph's root vertex and its largest uniq id (for new vertices' ids)."""
    nodes = _find(handle, "status=up or status=down")
    root = _root_node(nodes)
    if root is None:
        raise GraphError("the Fluxion graph has no root vertex (is the scheduler up?)")
    return GraphRoot.from_jgf_node(root), _max_id(nodes)


@dataclass(frozen=True)
class LoadResult:
    """What ``load`` did, as vertex paths (device and slot vertices alike)."""

    added: tuple[str, ...]  # new now
    present: tuple[str, ...]  # already in the graph
    updated: tuple[str, ...] = ()  # already there, properties refreshed from the catalog


def load(handle: Any, catalog: Catalog | Iterable[Device]) -> LoadResult:
    """Add the catalog's QPU vertices to the running instance's Fluxion graph.

    Idempotent: Fluxion reuses a vertex whose path and rank already exist, so loading
    again adds only what is missing (e.g. slots the catalog gained) and refreshes the
    properties of the vertices already there. Vertices the catalog no longer lists are
    left alone (a job may hold them). Vertices added at run time vanish when Fluxion
    reloads; the static JGF (``static_jgf``) is the way to keep them.
    """
    devices = list(catalog)
    root, max_id = instance_root(handle)
    existing = {_path(n): n for n in _find(handle, f"property={MARKER}")}
    jgf = catalog_jgf(devices, root, first_id=max(max_id, root.uniq_id) + 1)
    wanted = [n for n in jgf["graph"]["nodes"] if _path(n) != root.path]
    added = tuple(_path(n) for n in wanted if _path(n) not in existing)
    if added:
        _rpc(handle, "add_subgraph", {"subgraph": json.dumps(jgf)})
    present, updated = [], []
    for node in wanted:
        path = _path(node)
        if path not in existing:
            continue
        present.append(path)
        have = existing[path]["metadata"].get("properties") or {}
        stale = {
            key: value
            for key, value in node["metadata"].get("properties", {}).items()
            # set_property takes KEY=VALUE: it cannot store an empty value or a key with '='
            if have.get(key) != value and value and "=" not in key
        }
        for key, value in stale.items():
            _rpc(handle, "set_property", {"sp_resource_path": path, "sp_keyval": f"{key}={value}"})
        if stale:
            updated.append(path)
    return LoadResult(added=added, present=tuple(present), updated=tuple(updated))


def set_device_status(
    handle: Any, device: str | Device, up: bool, slots: int | None = None
) -> list[str]:
    """Mark a device's vertices up or down; return the paths marked.

    Down: Fluxion allocates none of its slots to new jobs (they wait in SCHED; a job
    already holding a slot keeps it). Up: Fluxion reconsiders the jobs that waited.
    ``slots``: with ``up``, only the first ``slots`` slot vertices are up and the others
    down (a device that publishes a smaller capacity than the graph holds).
    """
    name = _device_name(device)
    found = [v for v in find_qpus(handle) if v.device == name]
    if not found:
        raise GraphError(
            f"device {name!r} has no vertices in the Fluxion graph "
            "(load them with: flux quantum graph load)"
        )
    status = "up" if up else "down"
    _rpc(handle, "set_status", {"resource_path": found[0].device_path, "status": status})
    paths = [found[0].device_path]
    for index, vertex in enumerate(found):
        on = up and (slots is None or index < slots)
        _rpc(handle, "set_status", {"resource_path": vertex.path, "status": "up" if on else "down"})
        paths.append(vertex.path)
    return paths


def check_satisfiable(handle: Any, jobspec: Mapping[str, Any]) -> None:
    """Raise GraphError unless Fluxion could ever allocate JOBSPEC in this instance.

    Use before releasing a job with rewritten resources: a request Fluxion can never
    satisfy makes it kill the job (alloc exception "unsatisfiable") after its quantum
    task has run. Busy or down vertices do not make a request unsatisfiable.
    """
    jobid = _rpc(handle, "next_jobid", {}).get("jobid", 0)
    payload = {"cmd": "satisfiability", "jobid": jobid, "jobspec": json.dumps(jobspec)}
    try:
        handle.rpc(f"{RESOURCE_SERVICE}.match", payload).get()
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            raise GraphError(
                "Fluxion can never satisfy this request with the instance's resources"
            ) from None
        if exc.errno == errno.EINVAL:
            raise GraphError(
                "Fluxion rejected the request (is every device it names loaded into the "
                "graph? flux quantum graph list)"
            ) from None
        raise GraphError(f"{RESOURCE_SERVICE}.match: {exc.strerror or exc}") from None
