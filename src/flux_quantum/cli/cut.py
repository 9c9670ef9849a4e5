"""``flux quantum cut``: run a circuit too wide for the devices as fragments, recombined.

``plan`` shows the cut a circuit would get (fragments, cut gates, subexperiments, the
shots overhead and the cost bound) without submitting anything; ``submit`` prepares the
cut (``flux_quantum.cutting.run_bounded``: a bounded child process of this command, the
user's own, never the handler service), refuses it whole when the bound of its cost is
over ``qpu.max_cost``, writes its programs and manifest into a directory, and submits
one ordinary batch job through ``flux submit`` whose programs are the subexperiments:
the service spreads them over devices by the job's policy, holds the job until every
one has a result, fails them over as ``qpu.failover`` says, and charges them to the job.
``qpu.min_qubits`` is set to the widest fragment so that no subexperiment lands on a
device too small for it. ``result`` (run in the job, or after it with a job id) waits
for the results and prints the recombined expectation values with their standard errors,
the cut and where each subexperiment ran (``flux_quantum.job.cut``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from flux_quantum.catalog import CatalogError, Device, load_catalog
from flux_quantum.cutting.cost import CostBound, cost_bound
from flux_quantum.cutting.manifest import load, write_manifest
from flux_quantum.cutting.prepare import PrepareError, run_bounded
from flux_quantum.errors import CommandError
from flux_quantum.job.cut import ENV_CUT, MANIFEST_ATTRIBUTE, cut_result
from flux_quantum.protocol.request import QpuRequest, RequestError, parse_request
from flux_quantum.selection.policies import static_candidates
from flux_quantum.selection.program_kinds import cannot_run
from flux_quantum.site.quota import format_money

DEVICES = "devices"
_PROBE = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[1] q;\nbit[1] c;\nh q[0];\nc = measure q;\n'


def _request(args: argparse.Namespace) -> QpuRequest:
    """The job's qpu request from --qpu, --shots and --setattr, checked as at submit."""
    attr: dict[str, Any] = {}
    for pair in args.setattr:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("qpu.") or len(key) <= 4:
            raise CommandError(f"--setattr {pair!r}: use qpu.KEY=VALUE (a key of the qpu request)")
        try:
            attr[key[4:]] = json.loads(value)
        except ValueError:
            attr[key[4:]] = value
    if "program" in attr:
        raise CommandError("--setattr qpu.program: a cut's programs are its subexperiments")
    if args.qpu is not None:
        attr["device"] = args.qpu
    if args.shots is not None:
        attr["shots"] = args.shots
    try:
        return parse_request(attr)
    except RequestError as exc:
        raise CommandError(str(exc)) from None


def _max_width(text: str) -> int | None:
    """--max-width: a number of qubits, or None for the allowed devices' widest."""
    if text == DEVICES:
        return None
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise CommandError(f"--max-width must be a number of qubits >= 1 or '{DEVICES}', got {text!r}")


class Prepared:
    """A prepared cut: its manifest, the devices it may use, its cost bound."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.request = _request(args)
        try:
            self.circuit = Path(args.circuit).read_text()
        except OSError as exc:
            raise CommandError(f"{args.circuit}: {exc.strerror or exc}") from None
        try:
            catalog = load_catalog(args.catalog)
        except CatalogError as exc:
            raise CommandError(str(exc)) from None
        # The devices the request allows whatever they cost: the cut's cost is checked
        # whole, against its bound (``check_cost``), not task by task.
        allowed = static_candidates(catalog.devices, replace(self.request, max_cost=None))
        # Every subexperiment is OpenQASM: devices that take none never count.
        allowed = [d for d in allowed if d.name not in cannot_run(_PROBE, [d])]
        width = _max_width(args.max_width)
        if width is None:
            if not allowed:
                raise CommandError(
                    f"--max-width {DEVICES}: no device of the catalog fits the request "
                    f"({self.request.describe()})"
                )
            width = max(d.qubits for d in allowed)
        self.max_width = width
        try:
            self.doc = run_bounded(
                {"circuit": self.circuit, "observables": args.observable, "max_width": width}
            )
        except PrepareError as exc:
            raise CommandError(str(exc)) from None
        self.experiments = load(self.doc)
        self.widest = max(self.experiments.plan.widths)
        text = self.experiments.programs[0].text
        unfit = cannot_run(text, allowed)
        self.devices = [d for d in allowed if d.qubits >= self.widest and d.name not in unfit]
        if not self.devices:
            raise CommandError(
                f"no device the request allows holds the widest fragment ({self.widest} "
                f"qubits): lower --max-width or allow wider devices"
            )
        self.currency = catalog.currency
        self.bound = cost_bound(
            len(self.experiments.programs), self.request.shots, self._payable(catalog.devices)
        )

    def _payable(self, devices: tuple[Device, ...]) -> list[Device]:
        """The devices a subexperiment may be charged on: the allowed ones, and the
        simulators wide enough when it fails over to one."""
        out = list(self.devices)
        if self.request.failover == "simulator":
            out += [
                d
                for d in devices
                if d.device_class == "simulator"
                and d.qubits >= self.widest
                and d not in out
                and not cannot_run(self.experiments.programs[0].text, [d])
            ]
        return out

    def check_cost(self) -> None:
        """Refuse the whole cut, before any task, when its bound is over qpu.max_cost."""
        limit = self.request.max_cost
        if limit is not None and self.bound.total > limit + 1e-12:
            raise CommandError(
                f"qpu.max_cost: the cut's {self.bound.programs} subexperiments may cost up to "
                f"{self._money(self.bound.total)} ({self.bound.programs} tasks of "
                f"{self.bound.shots} shots at up to {self._money(self.bound.per_task)}), over "
                f"qpu.max_cost {self._money(limit)}; nothing was submitted"
            )

    def _money(self, amount: float) -> str:
        return format_money(amount, self.currency)

    def summary(self) -> dict[str, Any]:
        e = self.experiments
        return {
            "qubits": e.qubits,
            "max_width": self.max_width,
            "fragments": [
                {"qubits": [block[0], block[-1]], "width": width}
                for block, width in zip(e.plan.blocks, e.plan.widths, strict=True)
            ],
            "cut_gates": [dict(g) for g in e.cut_gates],
            "settings": len(e.groups),
            "terms": len(e.terms),
            "subexperiments": len(e.programs),
            "overhead": e.overhead,
            "shots": self.request.shots,
            "devices": [d.name for d in self.devices],
            "cost_bound": self.bound.total,
            "currency": self.currency,
        }


def _describe(summary: dict[str, Any], bound: CostBound) -> str:
    fragments = ", ".join(
        f"q[{f['qubits'][0]}..{f['qubits'][1]}] ({f['width']} wide)" for f in summary["fragments"]
    )
    gates = ", ".join(
        f"{g['gate']} q[{g['qubits'][0]}],q[{g['qubits'][1]}]" for g in summary["cut_gates"]
    )
    return "\n".join(
        [
            f"fragments:       {fragments}",
            f"cut gates:       {gates or 'none'}",
            f"subexperiments:  {summary['subexperiments']} ({summary['terms']} terms, "
            f"{summary['settings']} measurement setting(s))",
            f"shots overhead:  x{summary['overhead']:.3g} for the same standard error",
            f"devices:         {', '.join(summary['devices'])}",
            f"cost bound:      {format_money(bound.total, summary['currency'])} "
            f"({bound.programs} tasks of {bound.shots} shots)",
        ]
    )


def cmd_plan(args: argparse.Namespace) -> int:
    prepared = Prepared(args)
    summary = prepared.summary()
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(_describe(summary, prepared.bound))
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    rest = list(args.rest)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise CommandError(
            "cut submit: give the job's command (which runs flux quantum cut result)"
        )
    prepared = Prepared(args)
    prepared.check_cost()
    directory = Path(args.dir or Path(args.circuit).stem + ".cut").resolve()
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, program in enumerate(prepared.experiments.programs):
        path = directory / f"sub{i:03d}.qasm"
        path.write_text(program.text)
        paths.append(str(path))
    manifest = directory / "cut.json"
    write_manifest(
        manifest,
        prepared.experiments,
        {"circuit": str(Path(args.circuit).resolve()), "summary": prepared.summary()},
    )
    attr = prepared.request.to_attr()
    attr["program"] = paths
    attr["min_qubits"] = max(prepared.widest, prepared.request.min_qubits or 1)
    flux = shutil.which("flux")
    if flux is None:
        raise CommandError("flux is not on PATH: run it as 'flux quantum cut submit'")
    command = [flux, "submit"]
    command += [f"--setattr=qpu.{key}={json.dumps(value)}" for key, value in attr.items()]
    command += [f"--setattr=user.{MANIFEST_ATTRIBUTE}={manifest}", f"--env={ENV_CUT}={manifest}"]
    command += rest
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise CommandError(done.stderr.strip() or f"flux submit exited {done.returncode}")
    if args.verbose:
        print(
            f"cut: {len(paths)} subexperiments in {directory}, manifest {manifest}",
            file=sys.stderr,
        )
    print(done.stdout.strip())
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    result = cut_result(args.jobid, manifest=args.manifest, timeout=args.timeout)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    for estimate in result.estimates:
        print(f"{estimate.observable}  {estimate.value:+.5f} ± {estimate.standard_error:.5f}")
    where = ", ".join(f"{d} {n}" for d, n in sorted(result.to_dict()["devices"].items()))
    print(f"{len(result.tasks)} subexperiments ran on {where}", file=sys.stderr)
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("circuit", metavar="CIRCUIT", help="the circuit (OpenQASM 3 or 2)")
    p.add_argument(
        "-O",
        "--observable",
        action="append",
        required=True,
        metavar="PAULI",
        help="a Pauli string to estimate, one letter a qubit (first: q[0]) or sparse "
        "('X11 Z12'); repeatable",
    )
    p.add_argument(
        "--max-width",
        default=DEVICES,
        metavar="N|devices",
        help="the widest fragment accepted, ancillas included (default: the widest device "
        "the request allows)",
    )
    p.add_argument("--qpu", metavar="TARGET", help="qpu.device ('any', DEVICE, VENDOR:any...)")
    p.add_argument("--shots", type=int, help="shots of each subexperiment (default 1000)")
    p.add_argument(
        "--setattr",
        action="append",
        default=[],
        metavar="qpu.KEY=VALUE",
        help="any other qpu request key (repeatable)",
    )
    p.add_argument(
        "--catalog", metavar="PATH", help="the backends catalog (default: as the service finds it)"
    )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cut",
        help="run a circuit too wide for the devices as fragments (plan, submit, result)",
        description="Cut a circuit into fragments that fit the devices, run the "
        "subexperiments as one held batch job, recombine their results in the job.",
    )
    csub = p.add_subparsers(dest="cut_command", metavar="SUBCOMMAND")
    csub.required = True
    pl = csub.add_parser("plan", help="show the cut, its subexperiments and cost; submit nothing")
    _common(pl)
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_plan)
    s = csub.add_parser(
        "submit",
        help="prepare the cut and submit its job: prints the job id",
        usage="flux quantum cut submit [OPTIONS] CIRCUIT [FLUX-SUBMIT-OPTIONS] COMMAND...",
    )
    _common(s)
    s.add_argument("--dir", metavar="DIR", help="where the subexperiments go (default CIRCUIT.cut)")
    s.add_argument("-v", "--verbose", action="store_true")
    s.add_argument("rest", nargs=argparse.REMAINDER, metavar="FLUX-SUBMIT-OPTIONS COMMAND")
    s.set_defaults(func=cmd_submit)
    r = csub.add_parser("result", help="wait for a cut job's subexperiments and recombine")
    r.add_argument("jobid", nargs="?", metavar="JOBID", help="default: the job it runs in")
    r.add_argument("--manifest", metavar="PATH", help="default: the job's")
    r.add_argument("--timeout", type=float, metavar="SECONDS")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_result)
