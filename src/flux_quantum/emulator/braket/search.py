"""The filters and pages of Braket's SearchQuantumTasks and SearchDevices on the emulator.

This module owns how a search request is read and answered in pages: its ``filters`` list
checked, a quantum task's description matched against one filter (EQUAL, BETWEEN, LT,
LTE, GT, GTE on the task fields Braket filters by; ``createdAt`` compared as instants) and
the rows cut into ``maxResults`` pages with a ``nextToken``. It must never hold state or
read a clock; every bad request is a ValidationException.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flux_quantum.emulator.braket.wire import invalid, iso8601

TASK_FILTERS = ("quantumTaskArn", "deviceArn", "status", "createdAt", "jobArn")
JOB_FILTERS = ("jobArn", "jobName", "status", "createdAt", "device")


def filters(body: dict[str, Any], operation: str) -> list[dict[str, Any]]:
    """The search's ``filters``, each a ``name`` and a list of ``values``."""
    found = body.get("filters")
    if not isinstance(found, list):
        raise invalid(f"{operation} needs a 'filters' list")
    for f in found:
        if (
            not isinstance(f, dict)
            or not isinstance(f.get("name"), str)
            or not isinstance(f.get("values"), list)
        ):
            raise invalid("each filter needs a 'name' and a list of 'values'")
    return found


def task_matches(doc: dict[str, Any], f: dict[str, Any]) -> bool:
    """Whether the task GetQuantumTask describes as ``doc`` passes filter ``f``."""
    return _matches(doc, f, TASK_FILTERS)


def job_matches(doc: dict[str, Any], f: dict[str, Any]) -> bool:
    """Whether the job SearchJobs lists as ``doc`` passes filter ``f``."""
    if f.get("operator") == "CONTAINS" and f["name"] in JOB_FILTERS:
        actual = doc.get(f["name"])
        return actual is not None and any(str(v) in str(actual) for v in f["values"])
    return _matches(doc, f, JOB_FILTERS)


def _matches(doc: dict[str, Any], f: dict[str, Any], names: tuple[str, ...]) -> bool:
    name, values, operator = f["name"], [str(v) for v in f["values"]], f.get("operator", "EQUAL")
    if name not in names:
        raise invalid(f"filter name {name!r} must be one of {', '.join(names)}")
    actual = doc.get(name)
    if actual is None:
        return False
    if name == "createdAt":
        # ISO 8601 UTC strings order like the instants they name.
        actual, values = _iso_key(actual), [_iso_key(v) for v in values]
    if operator == "EQUAL":
        return actual in values
    if operator == "BETWEEN":
        if len(values) != 2:
            raise invalid("BETWEEN needs two values")
        return values[0] <= actual <= values[1]
    if len(values) != 1:
        raise invalid(f"{operator} needs one value")
    value = values[0]
    checks = {
        "LT": actual < value,
        "LTE": actual <= value,
        "GT": actual > value,
        "GTE": actual >= value,
    }
    if operator not in checks:
        raise invalid(f"operator {operator!r} must be one of EQUAL, BETWEEN, LT, LTE, GT, GTE")
    return checks[operator]


def _iso_key(value: str) -> str:
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise invalid(f"createdAt filter value {value!r} is not an ISO 8601 time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso8601(moment.astimezone(UTC))


def paginate(rows: list[dict[str, Any]], body: dict[str, Any]) -> tuple[list[Any], dict[str, str]]:
    """The page of ``rows`` the request's ``maxResults`` and ``nextToken`` ask for, and the
    ``nextToken`` of the next page ({} on the last)."""
    size = body.get("maxResults") or 100
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100:
        raise invalid(f"maxResults must be between 1 and 100, got {size!r}")
    token = body.get("nextToken")
    try:
        start = int(token) if token else 0
    except ValueError as exc:
        raise invalid(f"nextToken {token!r} is not one this service issued") from exc
    page = rows[start : start + size]
    more = {"nextToken": str(start + size)} if start + size < len(rows) else {}
    return page, more
