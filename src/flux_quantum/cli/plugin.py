"""``flux quantum`` subcommands that act on the jobtap plugin directly.

plugin-path, validator-path, jobs, release and fail: thin wrappers around
flux_quantum.plugin, formatted the way flux-core's own commands are.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.plugin import HeldJob, PluginClient, plugin_path, validator_path

JOBS_FORMAT = "{id:>12} {user:<8} {state:<7} {held:>8}  {request}"
JOBS_HEADERS = {
    "id": "JOBID",
    "user": "USER",
    "state": "STATE",
    "held": "HELD",
    "request": "REQUEST",
}


def _parse_jobid(text: str) -> int:
    try:
        from flux.job import JobID

        return int(JobID(text))
    except (ImportError, OSError):
        pass
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"invalid job id '{text}'") from exc
    try:
        return int(text, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid job id '{text}'") from exc


def _encode_jobid(jobid: int) -> str:
    try:
        from flux.job import JobID

        return JobID(jobid).f58
    except (ImportError, OSError):
        return str(jobid)


def _username(userid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(userid).pw_name
    except KeyError:
        return str(userid)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _describe(request: Any) -> str:
    try:
        from flux_quantum.request import parse_request

        return parse_request(request).describe()
    except (ImportError, ValueError):
        return json.dumps(request, sort_keys=True)


def _job_fields(job: HeldJob, now: float) -> dict[str, Any]:
    return {
        "id": _encode_jobid(job.id),
        "user": _username(job.userid),
        "state": "DEPEND",
        "held": _duration(job.held_for(now)),
        "request": _describe(job.request),
    }


def cmd_plugin_path(args: argparse.Namespace) -> int:
    print(plugin_path())
    return 0


def cmd_validator_path(args: argparse.Namespace) -> int:
    print(validator_path())
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    jobs = sorted(PluginClient().list(), key=lambda j: j.id)
    now = time.time()
    if args.json:
        out = [
            {
                "id": j.id,
                "jobid": _encode_jobid(j.id),
                "userid": j.userid,
                "state": "DEPEND",
                "request": j.request,
                "t_submit": j.t_submit,
                "held_seconds": round(j.held_for(now), 3),
            }
            for j in jobs
        ]
        print(json.dumps(out))
        return 0
    fmt = args.format or JOBS_FORMAT
    try:
        if not args.no_header:
            print(fmt.format(**JOBS_HEADERS).rstrip())
        for job in jobs:
            print(fmt.format(**_job_fields(job, now)).rstrip())
    except (KeyError, ValueError, IndexError) as exc:
        fields = ", ".join(JOBS_HEADERS)
        raise CommandError(f"--format: unknown or bad field {exc} (fields: {fields})") from exc
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    released = PluginClient().release(args.ids, task=args.task, device=args.device)
    for jobid in released:
        print(f"{_encode_jobid(jobid)}: released")
    return 0


def cmd_fail(args: argparse.Namespace) -> int:
    failed = PluginClient().fail(args.ids, note=args.note)
    for jobid in failed:
        print(f"{_encode_jobid(jobid)}: failed")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plugin-path", help="print the path of the built jobtap plugin")
    p.set_defaults(func=cmd_plugin_path)

    p = sub.add_parser("validator-path", help="print the path of the ingest validator plugin")
    p.set_defaults(func=cmd_validator_path)

    p = sub.add_parser("jobs", help="list jobs held for a QPU")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument(
        "-o", "--format", help="Python format string, fields: " + ", ".join(JOBS_HEADERS)
    )
    p.add_argument("-n", "--no-header", action="store_true", help="omit the header line")
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("release", help="release held jobs now (owner or instance owner)")
    p.add_argument("ids", nargs="+", type=_parse_jobid, metavar="ID")
    p.add_argument("--task", help="vendor task id to record in the jobspec")
    p.add_argument("--device", help="device name to record in the jobspec")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("fail", help="end held jobs with a qpu exception")
    p.add_argument("ids", nargs="+", type=_parse_jobid, metavar="ID")
    p.add_argument("--note", required=True, help="reason shown in the job's exception")
    p.set_defaults(func=cmd_fail)
