"""``flux quantum`` subcommands that act on the jobtap plugin directly.

plugin-path, validator-path, jobs, release and fail: thin wrappers around
flux_quantum.instance.plugin, formatted the way flux-core's own commands are.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from flux_quantum.cli import table
from flux_quantum.instance.plugin import HeldJob, PluginClient, plugin_path, validator_path
from flux_quantum.protocol.events import parse_eventlog, replay
from flux_quantum.protocol.jobspec import HeldMemo

# QPU_STATE says why a job is held (its queue, or a vendor that does not answer and
# when the service tries again): the request, often long, comes last.
JOBS_FORMAT = (
    "{id:>12} {user:<8} {state:<7} {held:>8} {device:<12} {task:<8} {position:>5} {wait:>6}"
    "  {qpu_state:<18}  {request}"
)
JOBS_HEADERS = {
    "id": "JOBID",
    "user": "USER",
    "state": "STATE",
    "held": "HELD",
    "device": "DEVICE",
    "task": "TASK",
    "task_id": "TASK_ID",
    "position": "POS",
    "wait": "WAIT",
    "qpu_state": "QPU_STATE",
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
        from flux_quantum.protocol.request import parse_request

        return parse_request(request).describe()
    except (ImportError, ValueError):
        return json.dumps(request, sort_keys=True)


def _job_fields(job: HeldJob, now: float, progress: dict[str, Any] | None = None) -> dict[str, Any]:
    progress = progress or {}
    task = progress.get("task")
    position = progress.get("position")
    wait = progress.get("expected_wait")
    return {
        "id": _encode_jobid(job.id),
        "user": _username(job.userid),
        "state": "DEPEND",
        "held": _duration(job.held_for(now)),
        "device": progress.get("device") or "-",
        # the vendor's task id, shortened like a git hash; task_id is the whole ARN
        "task": task.rsplit("/", 1)[-1][:8] if task else "-",
        "task_id": task or "-",
        "position": "-" if position is None else str(position),
        "wait": "-" if wait is None else _duration(float(wait)),
        "qpu_state": progress.get("qpu_state") or "-",
        "request": f"follows {_encode_jobid(job.follow)}" if job.follow else _describe(job.request),
    }


def _qpu_progress(handle: Any, jobs: list[HeldJob]) -> dict[int, dict[str, Any]]:
    """Device, task, queue position and expected wait of held jobs: from the volatile
    memos the handler service keeps (``flux jobs -o '{user.qpu_position}'``), else from
    what their eventlogs recorded (qpu-select, qpu-task, qpu-queue)."""
    import flux.constants

    progress: dict[int, dict[str, Any]] = {job.id: {} for job in jobs}
    if not jobs:
        return progress
    try:
        payload = {
            "max_entries": 0,
            "attrs": ["annotations"],
            "since": 0.0,
            "constraint": {"states": [flux.constants.FLUX_JOB_STATE_DEPEND]},
        }
        rows = handle.rpc("job-list.list", payload).get().get("jobs", [])
    except OSError:
        rows = []
    for row in rows:
        memo = HeldMemo.decode((row.get("annotations") or {}).get("user"))
        if row.get("id") in progress and memo.state:
            progress[row["id"]] = {
                "device": memo.device,
                "task": memo.task,
                "position": memo.position,
                "expected_wait": memo.wait,
                "qpu_state": memo.state,
            }
    for jobid, found in progress.items():
        if found:
            continue
        try:
            rsp = handle.rpc("job-info.lookup", {"id": jobid, "keys": ["eventlog"], "flags": 0})
            history = replay(parse_eventlog(rsp.get().get("eventlog")))
        except OSError:
            continue
        if history.device is not None:
            found.update(
                device=history.device,
                task=history.task,
                position=history.position,
                qpu_state="recorded (no live memo)",
            )
    return progress


def _waiting_states(jobs: list[HeldJob], progress: dict[int, dict[str, Any]]) -> None:
    """A job whose other dependencies still hold its task says so, from the plugin's
    list itself (the handler service need not run): ``waiting for dependency ...``."""
    from flux_quantum.service.waiting import holding, waiting_text

    by_id = {job.id: job for job in jobs}
    for job in jobs:
        holds = holding(job, by_id)
        if holds != ():
            progress[job.id]["qpu_state"] = waiting_text(job, holds)


def cmd_plugin_path(args: argparse.Namespace) -> int:
    print(plugin_path())
    return 0


def cmd_validator_path(args: argparse.Namespace) -> int:
    print(validator_path())
    return 0


def instance_config(plugin_conf: dict[str, int] | None = None) -> str:
    """TOML that loads the plugin and the validator into an instance (site or test),
    followed by comments saying how to load the job-shell plugin and the CLI plugin of
    ``flux submit`` (TOML cannot)."""
    from flux_quantum.cli.cliplugin import cli_plugin_comment
    from flux_quantum.job.consumer import shell_site_config

    conf = ", ".join(f'"{k}" = {v}' for k, v in (plugin_conf or {}).items())
    return (
        "# flux-quantum: hold jobs that ask for a QPU (generated by flux quantum config)\n"
        "[job-manager]\n"
        f'plugins = [ {{ load = "{plugin_path()}", conf = {{ {conf} }} }} ]\n'
        "\n"
        "[ingest.validator]\n"
        f'plugins = ["jobspec", "{validator_path()}"]\n'
        "\n"
        "[sched-fluxion-resource]\n"
        'match-format = "rv1"\n'
        "\n" + shell_site_config() + "\n" + cli_plugin_comment()
    )


def cmd_config(args: argparse.Namespace) -> int:
    if args.broker_opts:
        from flux_quantum.job.consumer import shell_broker_option

        print(shell_broker_option())
        return 0
    conf: dict[str, int] = {}
    if args.release_priority is not None:
        conf["release-priority"] = args.release_priority
    if args.max_held_per_user is not None:
        conf["max-held-per-user"] = args.max_held_per_user
    print(instance_config(conf), end="")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    import flux

    handle = flux.Flux()
    jobs = sorted(PluginClient(handle).list(), key=lambda j: j.id)
    progress = _qpu_progress(handle, jobs)
    _waiting_states(jobs, progress)
    now = time.time()
    if args.json:
        out = [
            {
                "id": j.id,
                "jobid": _encode_jobid(j.id),
                "userid": j.userid,
                "state": "DEPEND",
                "request": j.request,
                "follow": j.follow,
                "dependencies": None if j.dependencies is None else list(j.dependencies),
                "t_submit": j.t_submit,
                "held_seconds": round(j.held_for(now), 3),
                "device": progress[j.id].get("device"),
                "task": progress[j.id].get("task"),
                "position": progress[j.id].get("position"),
                "expected_wait": progress[j.id].get("expected_wait"),
                "qpu_state": progress[j.id].get("qpu_state"),
            }
            for j in jobs
        ]
        print(json.dumps(out))
        return 0
    rows = [_job_fields(job, now, progress[job.id]) for job in jobs]
    lines = table.render(
        rows,
        args.format or JOBS_FORMAT,
        tuple(JOBS_HEADERS),
        header=not args.no_header,
        headers=JOBS_HEADERS,
    )
    for line in lines:
        print(line)
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


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plugin-path", help="print the path of the built jobtap plugin")
    p.set_defaults(func=cmd_plugin_path)

    p = sub.add_parser("validator-path", help="print the path of the ingest validator plugin")
    p.set_defaults(func=cmd_validator_path)

    p = sub.add_parser("config", help="print instance TOML that loads the plugin and validator")
    p.add_argument("--release-priority", type=int, help="priority of released qpu jobs")
    p.add_argument("--max-held-per-user", type=int, help="most held qpu jobs per user")
    p.add_argument(
        "--broker-opts",
        action="store_true",
        help="print instead the broker option that loads the job-shell plugin (FLUX_QPU_*) "
        "in one instance: flux start ... $(flux quantum config --broker-opts)",
    )
    p.set_defaults(func=cmd_config)

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
