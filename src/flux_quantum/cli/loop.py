"""``flux quantum loop``: variational loops as chains of held steps.

``submit`` writes the loop's directory (``flux_quantum.job.loop``) and submits its first
step; ``status`` lists loops (iteration, state, device, best value, spend), the vendor
session their steps share and what it costs (an IBM session; a Braket hybrid job, its
instance's price: its tasks run ahead of the public queue), and, for one, its steps (with
``--steps``: what each step's predecessor decided for it, keep, early or give-back, and
why, and what it waited for); ``cancel`` ends a loop and cancels its live step; ``wait``
returns when a loop ended (rc 0 when it converged or did its iterations); ``step`` is the
command of every step job (``flux_quantum.job.steprun.run_step``). Each step is an
ordinary Flux job named ``ID.K`` with ``{user.qpu_loop}`` and ``{user.qpu_iteration}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from flux_quantum.cli import table
from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import encode_jobid
from flux_quantum.job.loop import (
    DEFAULT_MAX_ITERATIONS,
    SUCCESSFUL,
    LoopDir,
    LoopSpec,
    Resources,
    check_loop_id,
    known_loops,
    new_loop_id,
    resolve,
)
from flux_quantum.protocol import events
from flux_quantum.site.quota import format_money
from flux_quantum.timing.node_wait import duration_text

FIELDS = ("id", "iteration", "state", "device", "best", "spent", "job", "reason")
# status --steps: a line a step; task/nodes: what it waited for; why: its plan's reason
STEP_FIELDS = (
    "iteration", "job", "device", "value", "cost", "rc", "plan", "held", "task", "nodes", "why",
)  # fmt: skip


def _handle() -> Any:
    try:
        import flux
    except ImportError:
        raise CommandError(
            "the flux Python bindings are not importable: run it as 'flux quantum loop'"
        ) from None
    try:
        return flux.Flux()
    except OSError as exc:
        raise CommandError(f"cannot connect to Flux: {exc} (run it inside an instance)") from None


# --- submit ----------------------------------------------------------------------------------


def _qpu_attrs(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("qpu.") or len(key) <= 4:
            raise CommandError(f"--setattr {pair!r}: use qpu.KEY=VALUE (a key of the qpu request)")
        try:
            out[key[4:]] = json.loads(value)
        except ValueError:
            out[key[4:]] = value
    return out


def cmd_submit(args: argparse.Namespace) -> int:
    from flux_quantum.job.loopsteps import submit_loop

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CommandError(
            "loop submit: give the step command (the classical part of one iteration)"
        )
    try:
        program_text = Path(args.program).read_text()
    except OSError as exc:
        raise CommandError(f"--program {args.program}: {exc.strerror or exc}") from None
    request = _qpu_attrs(args.setattr)
    request["device"] = args.qpu
    for key, value in (
        ("shots", args.shots),
        ("session", args.session),
        ("policy", args.policy),
        ("failover", args.failover),
        ("release_at", args.release_at),
    ):
        if value is not None:
            request[key] = value
    loop_id = check_loop_id(args.name) if args.name else new_loop_id()
    spec = LoopSpec(
        id=loop_id,
        request=request,
        command=tuple(command),
        resources=Resources(
            nodes=args.nodes,
            ntasks=args.ntasks or 1,
            cores=args.cores_per_task,
            gpus=args.gpus_per_task,
            time_limit=args.time_limit,
            queue=args.queue,
            bank=args.bank,
        ),
        max_iterations=args.max_iterations,
        max_cost=args.max_cost,
        goal="max" if args.maximize else "min",
        cwd=os.getcwd(),
        created=time.time(),
        time_weight=args.time_weight,
    )
    loop, submitted = submit_loop(_handle(), spec, program_text, args.dir)
    if args.verbose:
        print(
            f"loop {loop_id}: directory {loop.path}, step 0 is job {encode_jobid(submitted.jobid)}",
            file=sys.stderr,
        )
    print(loop_id)
    return 0


# --- status --------------------------------------------------------------------------------


def _row(s: dict[str, Any]) -> dict[str, str]:
    best = "-" if s["best"] is None else f"{s['best']:.6g} (#{s['best_iteration']})"
    spent = format_money(s["spent"]) + ("+" if s["unsettled"] else "")
    if s["max_cost"] is not None:
        spent += f"/{format_money(s['max_cost'])}"
    iteration = f"{max(s['iteration'], 0)}/{s['max_iterations']}"
    moved = f" (moved from {s['moves'][-1]['from']})" if s["moves"] else ""
    return {
        "id": s["id"],
        "iteration": iteration,
        "state": s["state"],
        "device": s["device"] + moved,
        "best": best,
        "spent": spent,
        "job": s["job"] or "-",
        "reason": s["reason"] or "",
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else duration_text(value)


def _step_row(st: dict[str, Any]) -> dict[str, str]:
    """A step of ``status --steps``: its job (and the job it ran in, in place), its
    task's outcome, the plan the step before made for it, how the hold ended, what it
    waited for (its task's create -> result, its release -> nodes) and why."""
    plan, hold, waits = st.get("plan"), st.get("hold"), st.get("waits") or {}
    job = st["job"] + (f" (in {st['ran_in']})" if st.get("ran_in") else "")
    held = "-"
    if hold is not None:
        held = f"{_seconds(hold['held'])} {hold['outcome']}"
    elif plan is not None and plan["action"] == "keep":
        held = "holding"
    why = plan["reason"] if plan else ""
    if hold is not None and hold["outcome"] != "in place":
        why += f"; {hold['reason']}"
    return {
        "iteration": str(st["iteration"]),
        "job": job,
        "device": st["device"] or "-",
        "value": "-" if st["value"] is None else f"{st['value']:.6g}",
        "cost": "-" if st["cost"] is None else format_money(st["cost"]),
        "rc": "-" if st["rc"] is None else str(st["rc"]),
        "plan": plan["action"] if plan else "-",
        "held": held,
        "task": _seconds(waits.get("task")),
        "nodes": _seconds(waits.get("nodes")),
        "why": why,
    }


def _session(handle: Any, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The vendor session the loop's steps share, as the step that opened it recorded it
    (``qpu-session``: the mode asked for and in force, and why, with a hybrid job's
    price), or None when no step asked for one."""
    import flux.job

    found = None
    for step in steps:
        try:
            entry = flux.job.job_kvs_lookup(
                handle, flux.job.JobID(step["job"]), keys=["eventlog"], decode=False
            )
        except (OSError, ValueError):
            continue
        record = events.last(events.parse_eventlog((entry or {}).get("eventlog")), events.SESSION)
        session = events.decode(record) if record is not None else None
        if not isinstance(session, events.Session):
            continue
        found = {
            "device": session.device,
            "requested": session.requested,
            "mode": session.mode,
            "fingerprint": session.fingerprint,
            "reason": session.reason,
        }
        if session.joined is None:
            break  # the step that opened it says why and what it costs
    return found


def _session_line(summary: dict[str, Any]) -> str | None:
    session = summary.get("session")
    if not session:
        return None
    if session["mode"] == "job":
        what = f"no {session['requested']} session on {session['device']}"
    else:
        what = f"{session['mode']} session on {session['device']}"
    return f"{summary['id']}: {what}" + (f": {session['reason']}" if session["reason"] else "")


def cmd_status(args: argparse.Namespace) -> int:
    from flux_quantum.job.loopsteps import describe

    loops = [resolve(name) for name in args.loops] if args.loops else known_loops()
    handle = _handle()
    summaries = [describe(handle, loop, waits=args.steps) for loop in loops]
    for loop, summary in zip(loops, summaries, strict=True):
        if loop.spec.request.get("session"):
            summary["session"] = _session(handle, summary["steps"])
    if args.json:
        print(
            json.dumps(
                summaries if not args.loops or len(args.loops) > 1 else summaries[0], indent=2
            )
        )
        return 0
    rows = [_row(s) for s in summaries]
    fields = [f for f in FIELDS if f != "reason"]
    fmt = args.format or table.auto_format(rows, fields, right_aligned=("spent",), last="reason")
    for line in table.render(rows, fmt, FIELDS, header=not args.no_header):
        print(line)
    for summary in summaries:
        said = _session_line(summary)
        if said is not None:
            print(said)
    if args.steps:
        for s in summaries:
            print(f"\n{s['id']}: {s['directory']}")
            steps = [_step_row(st) for st in s["steps"]]
            fmt_steps = table.auto_format(
                steps, STEP_FIELDS[:-1], right_aligned=("iteration", "value", "cost"), last="why"
            )
            for line in table.render(steps, fmt_steps, STEP_FIELDS):
                print(line)
    return 0


# --- cancel, wait, step ------------------------------------------------------------------


def cmd_cancel(args: argparse.Namespace) -> int:
    from flux_quantum.job.loopsteps import cancel

    loop = resolve(args.loop)
    jobs = cancel(_handle(), loop, args.message or "loop cancelled by its user")
    what = ", ".join(encode_jobid(j) for j in jobs) or "no live step"
    print(f"loop {loop.id} cancelled ({what})", file=sys.stderr)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    from flux_quantum.job.loopsteps import wait_loop

    loop = resolve(args.loop)
    ended = wait_loop(_handle(), loop, args.timeout)
    print(f"loop {loop.id}: {ended.outcome} after iteration {ended.iteration}: {ended.reason}")
    return 0 if ended.outcome in SUCCESSFUL else 1


def cmd_step(args: argparse.Namespace) -> int:
    from flux_quantum.job.steprun import run_step

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    return run_step(LoopDir.open(args.directory), args.iteration, command)


# --- parsers -------------------------------------------------------------------------------


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "loop",
        help="variational loops as chains of held steps (submit, status, cancel, wait)",
        description="Run the iterations of a variational algorithm as a chain of Flux "
        "jobs: step K is held with no node until task K is done, runs the step command "
        "(which reads result K and writes program K+1), then submits step K+1.",
    )
    lsub = p.add_subparsers(dest="loop_command", metavar="SUBCOMMAND")
    lsub.required = True

    s = lsub.add_parser("submit", help="start a loop: prints its id")
    s.add_argument(
        "--qpu",
        required=True,
        metavar="TARGET",
        help="the device request of the first task ('any', DEVICE, VENDOR:DEVICE, VENDOR:any); later tasks go where it ran",
    )
    s.add_argument(
        "--program", required=True, metavar="FILE", help="the starting program (OpenQASM 3)"
    )
    s.add_argument("--shots", type=int, help="shots of each task (default 1000)")
    s.add_argument(
        "--session",
        choices=("dedicated", "batch"),
        help="one vendor session for the whole loop (IBM; on Braket a hybrid job, its "
        "tasks ahead of the public queue, where the site set vendors.braket.hybrid_role_arn)",
    )
    s.add_argument("--policy", help="how the first task chooses among devices (with 'any')")
    s.add_argument("--failover", help="qpu.failover of every step")
    s.add_argument(
        "--release-at",
        metavar="POINT",
        help="when a step is released: done (default: its task's result is there), predict, "
        "running or a queue position",
    )
    s.add_argument(
        "--time-weight",
        type=float,
        metavar="W",
        help="what one second of the loop's time is worth in seconds of idle nodes, when "
        "each step decides whether to keep its nodes for the next result, release the next "
        "step early or give the nodes back (0: never hold a node idle; default: the site's "
        "[quantum.loops] time-weight, else 0.25)",
    )
    s.add_argument(
        "--setattr",
        action="append",
        default=[],
        metavar="qpu.KEY=VALUE",
        help="any other qpu request key (repeatable)",
    )
    s.add_argument(
        "--max-iterations",
        type=int,
        default=DEFAULT_MAX_ITERATIONS,
        metavar="K",
        help=f"at most K steps (default {DEFAULT_MAX_ITERATIONS})",
    )
    s.add_argument(
        "--max-cost",
        type=float,
        metavar="AMOUNT",
        help="what the whole loop may spend (each step gets what is left as qpu.max_cost)",
    )
    s.add_argument(
        "--maximize", action="store_true", help="a higher value is better (default: lower)"
    )
    s.add_argument(
        "--dir",
        metavar="DIR",
        help="the loop's directory (default: $XDG_STATE_HOME/flux-quantum/loops/ID); on a file system every node sees",
    )
    s.add_argument("--name", metavar="ID", help="the loop's id (default: loop-XXXXXXXX)")
    s.add_argument("-N", "--nodes", type=int, metavar="N", help="nodes of each step")
    s.add_argument("-n", "--ntasks", type=int, metavar="N", help="tasks of each step")
    s.add_argument("-c", "--cores-per-task", type=int, default=1, metavar="N")
    s.add_argument("-g", "--gpus-per-task", type=int, default=0, metavar="N")
    s.add_argument("-t", "--time-limit", metavar="FSD", help="time limit of each step (e.g. 10m)")
    s.add_argument("-q", "--queue", metavar="NAME")
    s.add_argument("-B", "--bank", metavar="NAME")
    s.add_argument("-v", "--verbose", action="store_true", help="say where the loop lives")
    s.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND ...")
    s.set_defaults(func=cmd_submit)

    st = lsub.add_parser("status", aliases=["list"], help="where loops stand")
    st.add_argument(
        "loops",
        nargs="*",
        metavar="LOOP",
        help="loop ids or directories (default: every loop of yours)",
    )
    st.add_argument(
        "--steps",
        action="store_true",
        help="also list each loop's steps: the plan made for each (keep, early, give-back) "
        "and why, its hold, and what it waited for",
    )
    st.add_argument("--json", action="store_true")
    st.add_argument("-o", "--format", help="output format ({" + "}, {".join(FIELDS) + "})")
    st.add_argument("-n", "--no-header", action="store_true")
    st.set_defaults(func=cmd_status)

    c = lsub.add_parser("cancel", help="end a loop and cancel its live step (and its task)")
    c.add_argument("loop", metavar="LOOP")
    c.add_argument("-m", "--message", help="the reason recorded")
    c.set_defaults(func=cmd_cancel)

    w = lsub.add_parser(
        "wait", help="wait until a loop ended (rc 0: converged or did its iterations)"
    )
    w.add_argument("loop", metavar="LOOP")
    w.add_argument("--timeout", type=float, metavar="SECONDS")
    w.set_defaults(func=cmd_wait)

    r = lsub.add_parser("step", help=argparse.SUPPRESS)
    r.add_argument("directory")
    r.add_argument("iteration", type=int)
    r.add_argument("command", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_step)
