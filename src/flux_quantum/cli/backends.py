"""``flux quantum backends`` and ``flux quantum select``: the catalog as the vendors see it now.

This module only parses arguments, calls the catalog, vendor and policy libraries and
formats their answers the Flux way (``-o FORMAT``, ``-n``, ``--json``). It never talks to
a vendor except through ``flux_quantum.vendors`` and never waits longer than
``--timeout`` for one: an unreachable or hanging vendor shows as UNREACHABLE and never
hides the other devices.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flux_quantum.catalog import Catalog, Device
from flux_quantum.cli import table
from flux_quantum.compiler import CompileError, CompileLimits, CompilePool
from flux_quantum.compiler.choice import compile_each, weighed
from flux_quantum.errors import CommandError
from flux_quantum.protocol.programs import OPENQASM, kind_of
from flux_quantum.protocol.request import RequestError, parse_request
from flux_quantum.protocol.vendors import vendor_names
from flux_quantum.selection import program_kinds
from flux_quantum.selection.policies import NoDeviceError, select_device, static_candidates
from flux_quantum.selection.qasm import count_program
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus, Vendor
from flux_quantum.vendors.factory import make_vendor
from flux_quantum.vendors.probing import probe_devices

DEFAULT_TIMEOUT = 5.0
# Row fields for -o FORMAT; the header of a field is its name in upper case.
FIELDS = (
    "name",
    "vendor",
    "class",
    "qubits",
    "status",
    "queue",
    "price",
    "slots",
    "reason",
    "id",
    "region",
    "graph",
    "f1q",  # calibration medians: one-qubit gate, two-qubit gate and readout fidelity
    "f2q",
    "fro",
)
DEFAULT_FIELDS = ("name", "vendor", "class", "qubits", "status", "queue", "price", "slots")
RIGHT_ALIGNED = ("qubits", "queue", "slots", "graph")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backends = sub.add_parser(
        "backends",
        help="list the catalog's QPU backends with their live status, queue and price",
        description="Probe every catalog device (in parallel, each vendor bounded by "
        "--timeout) and print one row per device.",
    )
    backends.add_argument("--json", action="store_true", help="print JSON for machines")
    backends.add_argument(
        "-o",
        "--format",
        metavar="FORMAT",
        help="Python format string of fields: " + ", ".join(FIELDS) + " (e.g. '{name} {status}')",
    )
    backends.add_argument("-n", "--no-header", action="store_true", help="omit the header")
    backends.add_argument("--vendor", choices=vendor_names(), help="only this vendor")
    backends.add_argument(
        "-a", "--all", action="store_true", help="also list RETIRED devices (hidden by default)"
    )
    _add_common(backends)
    backends.set_defaults(func=cmd_backends)

    select = sub.add_parser(
        "select",
        help="show which device a qpu request would go to now",
        description="REQUEST is a short form ('any', 'sv1', 'braket:sv1', 'braket:any') or "
        "KEY=VALUE pairs of the qpu table (values are JSON where they parse as JSON), "
        "e.g. 'policy=min-cost class=qpu shots=500'.",
    )
    select.add_argument("request", nargs="+", metavar="REQUEST")
    select.add_argument("--explain", action="store_true", help="show every candidate and why")
    select.add_argument("--json", action="store_true", help="print JSON for machines")
    _add_common(select)
    select.set_defaults(func=cmd_select)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", metavar="FILE", help="backends catalog (YAML)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for each vendor (default {DEFAULT_TIMEOUT:g})",
    )


# --- shared steps --------------------------------------------------------------------


def _vendors(catalog: Catalog, devices: list[Device], timeout: float) -> dict[str, Vendor]:
    if not timeout > 0:
        raise CommandError(f"--timeout must be a number of seconds > 0, got {timeout:g}")
    vendors: dict[str, Vendor] = {}
    for name in dict.fromkeys(device.vendor for device in devices):
        vendors[name] = make_vendor(name, catalog, timeout=timeout)
    return vendors


def _probe(catalog: Catalog, devices: list[Device], timeout: float) -> dict[str, DeviceSnapshot]:
    return probe_devices(devices, _vendors(catalog, devices, timeout), timeout=timeout)


def _weigh(
    text: str, catalog: Catalog, devices: list[Device], timeout: float
) -> tuple[dict[str, str], dict[str, float]]:
    """The devices that cannot take the program ``text``, with why (its kind, its
    width; for a vendor whose programs are mapped, the program compiled for the device),
    and the expected success of the program as compiled for each device."""
    excluded = program_kinds.cannot_run(text, devices)
    fit = [d for d in devices if d.name not in excluded]
    if kind_of(text) != OPENQASM or not fit:
        return excluded, {}
    pool = CompilePool(CompileLimits(workers=1))
    try:
        answers = compile_each(text, fit, _vendors(catalog, fit, timeout), pool)()
        success, unfit = weighed(answers)
    except CompileError as exc:
        raise CommandError(f"qpu.program: {exc}") from None
    finally:
        pool.close()
    return {**excluded, **unfit}, success


# --- backends ------------------------------------------------------------------------


def graph_slots(devices: Iterable[Device]) -> dict[str, str] | None:
    """Per device, its QPU slot vertices in this instance's Fluxion graph as
    "FREE/TOTAL" (or "down"), or None outside an instance or without vertices."""
    if not os.environ.get("FLUX_URI"):
        return None
    try:
        import flux

        from flux_quantum.instance.graph import find_qpus

        vertices = find_qpus(flux.Flux())
    except Exception:  # no Fluxion, a guest (owner-only RPC), no instance: no column
        return None
    if not vertices:
        return None
    shown: dict[str, str] = {}
    for device in devices:
        mine = [v for v in vertices if v.device == device.name]
        if not mine:
            shown[device.name] = "-"
        elif not any(v.up for v in mine):
            shown[device.name] = "down"
        else:
            free = sum(1 for v in mine if v.up and not v.allocated)
            shown[device.name] = f"{free}/{len(mine)}"
    return shown


def backend_row(device: Device, snapshot: DeviceSnapshot) -> dict[str, str]:
    """All ``-o`` fields of one device, as display strings."""
    status = snapshot.status.value
    if snapshot.status is DeviceStatus.ONLINE and not snapshot.in_window:
        status = "ONLINE*"  # online, but outside its execution window
    reason = snapshot.reason or ("OUTSIDE_AVAILABILITY_WINDOW" if not snapshot.in_window else "")
    return {
        "name": device.name,
        "vendor": device.vendor,
        "class": device.device_class,
        "qubits": str(device.qubits),
        "status": status,
        "queue": snapshot.describe_queue(),
        "price": (snapshot.price or device.price).describe(),
        "slots": str(device.slots),
        "reason": reason,
        "id": device.id,
        "region": device.region,
        "graph": "-",
        **calibration_fields(snapshot),
    }


def calibration_fields(snapshot: DeviceSnapshot) -> dict[str, str]:
    """The vendor's calibration medians as percentages ("-": none published)."""
    calibration = snapshot.calibration
    figures = {
        "f1q": calibration.one_qubit_median if calibration else None,
        "f2q": calibration.two_qubit_median if calibration else None,
        "fro": calibration.readout_median if calibration else None,
    }
    return {key: "-" if v is None else f"{100 * v:.2f}%" for key, v in figures.items()}


def render_rows(
    rows: list[dict[str, str]], fmt: str | None, header: bool, with_graph: bool = False
) -> list[str]:
    """The backends listing; by default its columns sized to content, the reason last."""
    columns = (*DEFAULT_FIELDS, "graph") if with_graph else DEFAULT_FIELDS
    fmt = fmt or table.auto_format(rows, columns, RIGHT_ALIGNED, last="reason")
    return table.render(rows, fmt, FIELDS, header=header)


def cmd_backends(args: argparse.Namespace) -> int:
    catalog = table.catalog(args.catalog)
    devices = [d for d in catalog if args.vendor is None or d.vendor == args.vendor]
    if not devices:
        raise CommandError(f"{catalog.path}: no {args.vendor} devices in the catalog")
    snapshots = _probe(catalog, devices, args.timeout)
    shown = [d for d in devices if args.all or snapshots[d.name].status is not DeviceStatus.RETIRED]
    slots = graph_slots(shown)
    if args.json:
        records = [{**d.to_dict(), **snapshots[d.name].to_dict()} for d in shown]
        for device, record in zip(shown, records, strict=True):
            record.pop("device", None)
            record["graph"] = slots.get(device.name) if slots else None
        json.dump(records, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [backend_row(d, snapshots[d.name]) for d in shown]
    if slots:
        for row in rows:
            row["graph"] = slots.get(row["name"], "-")
    for line in render_rows(rows, args.format, header=not args.no_header, with_graph=bool(slots)):
        print(line)
    return 0


# --- select --------------------------------------------------------------------------


def request_value(words: list[str]) -> str | dict[str, Any]:
    """The qpu request from command-line words: one short form, or KEY=VALUE pairs."""
    if len(words) == 1 and "=" not in words[0]:
        return words[0]
    table: dict[str, Any] = {}
    for word in words:
        key, sep, text = word.partition("=")
        if not sep or not key:
            raise CommandError(
                f"REQUEST must be one short form or KEY=VALUE pairs, got {word!r} among them"
            )
        try:
            table[key] = json.loads(text)
        except ValueError:
            table[key] = text
    return table


def cmd_select(args: argparse.Namespace) -> int:
    try:
        request = parse_request(request_value(args.request))
    except RequestError as exc:
        raise CommandError(str(exc)) from None
    catalog = table.catalog(args.catalog)
    program = None
    excluded: dict[str, str] = {}
    compiled: dict[str, float] = {}
    candidates = static_candidates(catalog, request)
    if request.program:  # its first program: what each device can take, and how well
        try:
            text = Path(request.program[0]).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"qpu.program: cannot read {request.program[0]}: {exc}") from None
        program = count_program(text)
        excluded, compiled = _weigh(text, catalog, candidates, args.timeout)
    snapshots = _probe(catalog, [d for d in candidates if d.name not in excluded], args.timeout)
    try:
        selection = select_device(
            catalog, snapshots, request, program=program, excluded=excluded, compiled=compiled
        )
    except NoDeviceError as exc:
        if args.json:
            print(json.dumps({"device": None, "explanation": exc.explanation.to_dict()}, indent=2))
        elif args.explain:
            print(exc.explanation.render_text())
        raise CommandError(str(exc)) from None
    device = selection.device
    if args.json:
        record = {
            "device": device.name,
            "vendor": device.vendor,
            "id": device.id,
            "explanation": selection.explanation.to_dict(),
        }
        print(json.dumps(record, indent=2))
    elif args.explain:
        print(selection.explanation.render_text())
    else:
        print(device.name)
    return 0
