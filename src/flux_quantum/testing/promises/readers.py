"""The promise checker's readers: what a run left behind, gathered into ``Facts``.

``gather`` reads, once, the jobs' eventlogs, jobspecs and memos from Flux
(``read_jobs``, through the Flux bindings and the service's own reader), the
emulator's bill from ``GET {url}/_emulator/report``, the site ledger read-only
(``read_ledger``: a SQLite file, or a PostgreSQL ledger several instances share) and
log texts. It only reads: it never writes to Flux, the ledger or the emulator; what
it read is judged by :mod:`flux_quantum.testing.promises.checks`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flux_quantum.emulator.bill import read_report
from flux_quantum.protocol.events import Event
from flux_quantum.protocol.jobspec import REQUEST_ATTRIBUTE, Released
from flux_quantum.testing.promises.facts import (
    STATES,
    Bill,
    Facts,
    JobFacts,
    LedgerRow,
    state_of,
)


def read_ledger(
    path: str | Path, *, credentials: str | None = None, cluster: str | None = None
) -> tuple[LedgerRow, ...]:
    """Every charge of the site ledger, opened read-only (the service may be writing):
    a SQLite file, or a PostgreSQL ledger's ``postgresql://`` URL (its password in the
    ``credentials`` file). ``cluster``: only the rows that instance wrote (a ledger
    several instances share)."""
    columns = "token, jobid, state, cost, estimate, task_id, device, userid"
    if str(path).startswith(("postgresql://", "postgres://")):
        from flux_quantum.site.ledger import Ledger, LedgerError

        where, args = ("WHERE cluster = ?", (cluster,)) if cluster is not None else ("", ())
        try:
            with Ledger(str(path), readonly=True, credentials=credentials) as ledger:
                rows = ledger._store.rows(f"SELECT {columns} FROM charges {where}", args)
        except LedgerError as exc:
            raise ValueError(f"ledger: cannot read the charges of {path}: {exc}") from None
    else:
        uri = Path(path).absolute().as_uri() + "?mode=ro"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=5.0)
        except sqlite3.Error as exc:
            raise ValueError(f"ledger: cannot open {path} read-only: {exc}") from None
        try:
            where, args = ("WHERE cluster = ?", (cluster,)) if cluster is not None else ("", ())
            rows = db.execute(f"SELECT {columns} FROM charges {where}", args).fetchall()
        except sqlite3.Error as exc:
            raise ValueError(f"ledger: cannot read the charges of {path}: {exc}") from None
        finally:
            db.close()
    return tuple(
        LedgerRow(
            token=str(token),
            jobid=int(jobid),
            state=str(state),
            cost=None if cost is None else float(cost),
            estimate=float(estimate),
            task_id=task_id,
            device=str(device),
            userid=int(userid),
        )
        for token, jobid, state, cost, estimate, task_id, device, userid in rows
    )


def _read_texts(texts: Mapping[str, str] | Sequence[Path]) -> dict[str, str]:
    if isinstance(texts, str | bytes):
        raise ValueError("texts: give a mapping of place -> text or a list of paths, not a string")
    if isinstance(texts, Mapping):
        out = {}
        for place, text in texts.items():
            if not isinstance(text, str):
                raise ValueError(f"texts: the text of {place!r} must be a string")
            out[str(place)] = text
        return out
    out = {}
    for path in texts:
        try:
            out[str(path)] = Path(path).read_text(errors="replace")
        except OSError as exc:
            raise ValueError(f"texts: cannot read {path}: {exc.strerror}") from None
    return out


def _state_name(state: Any) -> str:
    from flux.job.info import statetostr

    return str(statetostr(state))


def _is_qpu(system: Mapping[str, Any], job_events: Sequence[Event]) -> bool:
    if REQUEST_ATTRIBUTE in system:
        return True
    dependencies = system.get("dependencies")
    if isinstance(dependencies, list) and any(
        isinstance(d, Mapping) and d.get("scheme") == "qpu" for d in dependencies
    ):
        return True
    return any(e.name.startswith("qpu-") for e in job_events)


def read_jobs(
    uri: str | None, jobs: Iterable[int] | None = None
) -> tuple[tuple[JobFacts, ...], dict[str, str]]:
    """The jobs of the instance at ``uri`` (None: ``FLUX_URI``), or those of ``jobs``,
    through the Flux bindings: job-list for ids, states, users and memos, the service's
    own reader (``FluxJobs.records``) for eventlogs and jobspecs; and, as texts to scan,
    the exec eventlogs of the jobs that started. A job's state is the further of
    job-list's and its eventlog's (job-list may lag behind)."""
    try:
        import flux
    except ImportError:
        raise ValueError(
            "uri: the Flux Python bindings are not importable here; run the checker in"
            " the Python environment flux-quantum was installed into"
        ) from None

    from flux_quantum.instance.rpc import pipelined
    from flux_quantum.service.fluxside import FluxJobs

    handle = flux.Flux(uri) if uri else flux.Flux()
    payload = {"max_entries": 0, "attrs": ["state", "userid", "annotations"], "since": 0.0}
    rows = {row["id"]: row for row in handle.rpc("job-list.list", payload).get()["jobs"]}
    ids = sorted(rows) if jobs is None else list(dict.fromkeys(int(j) for j in jobs))
    records = FluxJobs(handle).records(ids)
    out = []
    started = []
    for jobid in ids:
        if jobid not in records:
            raise ValueError(f"jobs: cannot read the eventlog and jobspec of job {jobid}")
        record = records[jobid]
        if record is None:
            raise ValueError(f"jobs: the instance does not know job {jobid}")
        row = rows.get(jobid, {})
        state = state_of(record.events)
        if "state" in row:
            state = max(_state_name(row["state"]), state, key=STATES.index)
        release = Released.decode(record.system)
        tasks: tuple[str, ...] = ()
        if release is not None:
            tasks = release.info.tasks or ((release.task,) if release.task else ())
        memo = (row.get("annotations") or {}).get("user") or {}
        userid = row.get("userid", record.submitter())
        out.append(
            JobFacts(
                jobid=jobid,
                userid=userid if isinstance(userid, int) else -1,
                state=state,
                events=record.events,
                qpu=_is_qpu(record.system, record.events),
                released_tasks=tasks,
                memo=memo if isinstance(memo, Mapping) else {},
            )
        )
        if record.has_event("start"):
            started.append(jobid)
    texts = {}
    requests = [
        ("job-info.lookup", {"id": j, "keys": ["guest.exec.eventlog"], "flags": 0}) for j in started
    ]
    for jobid, answer in zip(started, pipelined(handle, requests), strict=True):
        if isinstance(answer, Mapping):
            texts[f"exec eventlog {jobid}"] = str(answer.get("guest.exec.eventlog") or "")
    return tuple(out), texts


def gather(
    *,
    uri: str | None,
    emulator_url: str,
    ledger: Path | str | None,
    texts: Mapping[str, str] | Sequence[Path] = (),
    secrets: Sequence[str] = (),
    jobs: Iterable[int] | None = None,
    ledger_credentials: str | None = None,
    cluster: str | None = None,
) -> Facts:
    """Everything ``check`` needs, read once: the jobs of the Flux instance at ``uri``
    (None: ``FLUX_URI``; ``jobs``: only these), the emulator's report at
    ``emulator_url``, the site ledger at ``ledger`` (None: not checked), the ``texts``
    (place -> text, or log files), and the ``secrets`` to look for. A PostgreSQL ledger
    (``ledger`` its URL, ``ledger_credentials`` its password's file) shared by several
    instances: ``cluster`` reads only this instance's rows. Raises ValueError naming
    what could not be read."""
    if isinstance(secrets, str):
        raise ValueError("secrets: give a list of strings, not one string")
    report = read_report(emulator_url)
    bill = Bill.from_report(report)
    places = _read_texts(texts)
    job_facts, exec_logs = read_jobs(uri, jobs)
    places.update(exec_logs)
    rows = (
        None
        if ledger is None
        else read_ledger(ledger, credentials=ledger_credentials, cluster=cluster)
    )
    faults = report.get("faults") or {}
    if not isinstance(faults, Mapping):
        raise ValueError("emulator report: faults must be an object")
    return Facts(
        jobs=job_facts,
        bill=bill,
        ledger=rows,
        texts=places,
        secrets=tuple(secrets),
        scope=None if jobs is None else tuple(j.jobid for j in job_facts),
        calls=_counters(report.get("calls"), "emulator report: calls"),
        faults={str(k): _counters(v, f"emulator report: faults.{k}") for k, v in faults.items()},
    )


def _counters(value: Any, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in value.values()
    ):
        raise ValueError(f"{where} must map names to integers")
    return {str(k): int(v) for k, v in value.items()}
