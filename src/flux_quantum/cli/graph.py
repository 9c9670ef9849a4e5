"""``flux quantum graph``: QPU vertices in the Fluxion graph (load, jgf, list, status).

Thin: parses arguments, calls ``flux_quantum.instance.graph`` and formats the answer the Flux
way (``-o FORMAT``, ``-n``, ``--json``). It never talks to a vendor; every command but
``jgf`` needs a Flux instance with Fluxion and its owner's rights.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flux_quantum.cli import table
from flux_quantum.errors import CommandError
from flux_quantum.instance import graph

LIST_FIELDS = ("device", "slot", "status", "alloc", "vendor", "class", "qubits", "path")
LIST_DEFAULT = ("device", "slot", "status", "alloc", "vendor", "qubits")
RIGHT_ALIGNED = ("slot", "qubits")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "graph",
        help="QPU vertices in the Fluxion resource graph",
        description="Add the catalog's devices to Fluxion as vertices jobs allocate "
        "(one qpu vertex per device slot), list them, mark them up or down, or write "
        "the JGF for a static [resource] scheduling file.",
    )
    gsub = parser.add_subparsers(dest="graph_command", metavar="COMMAND")
    gsub.required = True

    load = gsub.add_parser(
        "load",
        help="add the catalog's QPU vertices to the running instance (idempotent)",
        description="Add one qpu-NAME vertex per device and one qpu vertex per slot under "
        "the cluster root with add_subgraph. Loading again adds only what is missing. "
        "Vertices added at run time vanish when Fluxion reloads: use 'graph jgf' for a "
        "static graph.",
    )
    load.add_argument("catalog", nargs="?", metavar="CATALOG", help="backends catalog (YAML)")
    load.add_argument("--json", action="store_true", help="print JSON for machines")
    load.set_defaults(func=cmd_load)

    jgf = gsub.add_parser(
        "jgf",
        help="print the JGF of the QPU vertices, with nodes for [resource] scheduling",
        description="Without --R/--nodes: the QPU subgraph under /cluster0 (what 'graph "
        "load' adds). With them: a complete graph (the nodes of R, encoded as Fluxion's "
        "'flux ion-R encode' does, plus the QPU vertices) for [resource] scheduling, next "
        "to [resource] path = the same R.",
    )
    jgf.add_argument("catalog", nargs="?", metavar="CATALOG", help="backends catalog (YAML)")
    nodes = jgf.add_mutually_exclusive_group()
    nodes.add_argument(
        "--R", dest="rfile", metavar="FILE", help="RFC 20 R of the instance ('-' for stdin)"
    )
    nodes.add_argument(
        "--nodes", metavar="HOSTS", help="hostlist of identical nodes, ranks in order"
    )
    jgf.add_argument("--cores", metavar="IDS", help="core ids of each node (with --nodes)")
    jgf.add_argument("--gpus", metavar="IDS", help="gpu ids of each node (with --nodes)")
    jgf.add_argument("--output", "-O", metavar="FILE", help="write to FILE instead of stdout")
    jgf.set_defaults(func=cmd_jgf)

    lst = gsub.add_parser(
        "list",
        help="list the qpu vertices with their status and allocation",
        description="One row per qpu slot vertex in the Fluxion graph.",
    )
    lst.add_argument("--json", action="store_true", help="print JSON for machines")
    lst.add_argument(
        "-o",
        "--format",
        metavar="FORMAT",
        help="Python format string of fields: " + ", ".join(LIST_FIELDS),
    )
    lst.add_argument("-n", "--no-header", action="store_true", help="omit the header")
    lst.set_defaults(func=cmd_list)

    status = gsub.add_parser(
        "status",
        help="mark a device's vertices up or down",
        description="Down: Fluxion gives none of the device's slots to new jobs (they "
        "wait); up: waiting jobs are reconsidered.",
    )
    status.add_argument("device", metavar="DEVICE")
    status.add_argument("state", choices=("up", "down"), metavar="up|down")
    status.set_defaults(func=cmd_status)


# --- shared steps ---------------------------------------------------------------------


def _handle() -> Any:
    try:
        import flux

        return flux.Flux()
    except ImportError:
        raise CommandError("the Flux Python bindings are not importable") from None
    except OSError as exc:
        raise CommandError(f"cannot connect to Flux: {exc.strerror or exc}") from None


def _graph_call(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except graph.GraphError as exc:
        raise CommandError(str(exc)) from None


# --- commands -------------------------------------------------------------------------


def cmd_load(args: argparse.Namespace) -> int:
    catalog = table.catalog(args.catalog)
    result = _graph_call(graph.load, _handle(), catalog)
    if args.json:
        record = {
            "added": list(result.added),
            "present": list(result.present),
            "updated": list(result.updated),
        }
        print(json.dumps(record, indent=2))
        return 0
    slots = sum(device.slots for device in catalog)
    print(
        f"{len(catalog)} devices, {slots} qpu slots from {catalog.path}: "
        f"{len(result.added)} vertices added, {len(result.present)} already present"
        + (f", {len(result.updated)} updated" if result.updated else "")
    )
    return 0


def _read_R(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--R {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"--R {path}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CommandError(f"--R {path}: an R object (RFC 20) is a JSON object")
    return value


def cmd_jgf(args: argparse.Namespace) -> int:
    catalog = table.catalog(args.catalog)
    if (args.cores or args.gpus) and not args.nodes:
        raise CommandError("--cores and --gpus go with --nodes")
    if args.nodes and not args.cores:
        raise CommandError("--nodes needs --cores (the core ids of each node, e.g. 0-63)")
    if args.rfile:
        document = _graph_call(graph.static_jgf, catalog, _read_R(args.rfile))
    elif args.nodes:
        R = _graph_call(graph.nodes_R, args.nodes, args.cores, args.gpus)
        document = _graph_call(graph.static_jgf, catalog, R)
    else:
        document = graph.catalog_jgf(catalog)
    text = json.dumps(document, indent=1) + "\n"
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"--output {args.output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0


def list_row(vertex: graph.QpuVertex) -> dict[str, str]:
    props = vertex.properties
    return {
        "device": vertex.device,
        "slot": str(vertex.slot),
        "status": vertex.status,
        "alloc": "allocated" if vertex.allocated else "free",
        "vendor": props.get("vendor", ""),
        "class": props.get("class", ""),
        "qubits": props.get("qubits", ""),
        "path": vertex.path,
    }


def cmd_list(args: argparse.Namespace) -> int:
    vertices = _graph_call(graph.find_qpus, _handle())
    if args.json:
        print(json.dumps([v.to_dict() for v in vertices], indent=2))
        return 0
    rows = [list_row(v) for v in vertices]
    fmt = args.format or table.auto_format(rows, LIST_DEFAULT, RIGHT_ALIGNED, last="path")
    for line in table.render(rows, fmt, LIST_FIELDS, header=not args.no_header):
        print(line)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    paths = _graph_call(graph.set_device_status, _handle(), args.device, args.state == "up")
    print(f"{args.device}: {len(paths)} vertices marked {args.state}")
    return 0
