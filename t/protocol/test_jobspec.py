"""Unit tier: the jobspec half of the protocol (flux_quantum.protocol.jobspec) — the release record
written into a job's jobspec and read back without trusting it, the memos on a held job —
and the C plugins' copies of the names (jobtap/qpu_protocol.h), which must not drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flux_quantum.job import consumer
from flux_quantum.protocol import events, request
from flux_quantum.protocol import jobspec as protocol
from flux_quantum.protocol.jobspec import HeldMemo, Released, ReleaseInfo, released

JOBTAP = Path(__file__).resolve().parents[2] / "jobtap"
HEADER = JOBTAP / "qpu_protocol.h"
# The jobtap plugin's files (one per concern) and the job-shell plugin.
C_SOURCES = (*sorted(JOBTAP.glob("quantum*.c")), JOBTAP / "shell_quantum.c")
TASK = "arn:aws:braket:us-east-1:123456789012:quantum-task/aaaa"

# What the service wrote at release before the record had a type (service/release.py):
# the wire form the jobtap plugin stores and the job-shell plugin reads.
WRITTEN = {
    "vendor": "braket",
    "device_id": "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
    "region": "us-east-1",
    "tasks": [TASK, TASK + "b"],
    "devices": ["sv1", "garnet"],
    "catalog": "/etc/flux/quantum/backends.yaml",
    "read_via": "qpu_handlers",
    "account": "site",
}


def jobspec(**system) -> dict:
    return {"version": 1, "attributes": {"system": {"duration": 0, **system}}}


# --- the release record ---------------------------------------------------------------------


RESERVATION_ARN = "arn:aws:braket:us-east-1:123456789012:reservation/forte-am"


def test_release_info_is_the_qpu_info_object_and_back():
    info = ReleaseInfo.decode(WRITTEN)
    assert info == ReleaseInfo(
        vendor="braket",
        device_id=WRITTEN["device_id"],
        region="us-east-1",
        tasks=(TASK, TASK + "b"),
        devices=("sv1", "garnet"),
        catalog=WRITTEN["catalog"],
        read_via="qpu_handlers",
        account=protocol.SITE_ACCOUNT,
    )
    assert info.site_paid
    assert info.to_dict() == WRITTEN and list(info.to_dict()) == list(WRITTEN)
    # What a release did not say stays out, both ways.
    assert ReleaseInfo().to_dict() == {} and ReleaseInfo.decode({}) == ReleaseInfo()
    owner = {k: v for k, v in WRITTEN.items() if k not in ("read_via", "account")}
    assert ReleaseInfo.decode(owner).to_dict() == owner
    assert not ReleaseInfo.decode(owner).site_paid


@pytest.mark.parametrize("value", [None, "braket", ["vendor"], 3])
def test_a_qpu_info_that_is_not_an_object_says_nothing(value):
    assert ReleaseInfo.decode(value) == ReleaseInfo()


def test_a_release_into_a_window_records_it_and_trusts_no_field_of_it():
    window = protocol.ReleasedWindow(name="forte-am", arn=RESERVATION_ARN, end=1800.0)
    info = ReleaseInfo(vendor="braket", tasks=(TASK,), reservation=window)
    assert info.to_dict()["reservation"] == {
        "name": "forte-am",
        "arn": RESERVATION_ARN,
        "end": 1800.0,
    }
    assert ReleaseInfo.decode(info.to_dict()) == info
    assert window.open_at(1799.9) and not window.open_at(1800.0)
    for bad in (
        "forte-am",
        {"name": "x", "arn": RESERVATION_ARN},
        {"name": "", "arn": "a", "end": 1},
        {"name": "x", "arn": RESERVATION_ARN, "end": "soon"},
    ):
        assert ReleaseInfo.decode({"reservation": bad}).reservation is None


def test_release_info_trusts_no_field():
    info = ReleaseInfo.decode(
        {
            "vendor": 7,
            "device_id": "",
            "region": ["us-east-1"],
            "tasks": [TASK, 5, "", None, TASK + "b"],
            "devices": ["sv1", 3, ""],
            "catalog": {"path": "x"},
            "read_via": True,
            "account": None,
            "extra": "ignored",
        }
    )
    assert info == ReleaseInfo(tasks=(TASK, TASK + "b"), devices=("sv1", "", ""))
    # A device keeps its place: the device of the n-th task is still the n-th.
    assert ReleaseInfo.decode({"tasks": "a b", "devices": "sv1"}) == ReleaseInfo()


def test_released_reads_the_three_attributes_of_a_released_job():
    record = Released(TASK, "sv1", ReleaseInfo.decode(WRITTEN))
    system = record.to_system()
    assert system == {"qpu_task": TASK, "qpu_device": "sv1", "qpu_info": WRITTEN}
    assert released(jobspec(qpu="sv1", **system)) == record
    # Held (no qpu_task): not released. Released by hand without a task: task "".
    assert released(jobspec(qpu="sv1")) is None
    assert released(jobspec(qpu="sv1", qpu_task="")) == Released("")
    assert Released("").to_system() == {"qpu_task": ""}
    # Read, never trusted.
    bad = released(jobspec(qpu="sv1", qpu_task=["x"], qpu_device=5, qpu_info="{}"))
    assert bad == Released("")
    for spec in ({}, {"attributes": None}, {"attributes": {"system": []}}):
        assert released(spec) is None
        assert protocol.system_of(spec) == {}


def test_the_names_written_at_release_are_the_ones_refused_at_submit():
    assert protocol.RELEASE_ATTRIBUTES == ("qpu_task", "qpu_device", "qpu_info")
    assert request.RESERVED_ATTRIBUTES == protocol.RELEASE_ATTRIBUTES
    assert all(a.startswith(request.RESERVED_PREFIX) for a in protocol.RELEASE_ATTRIBUTES)
    for attribute in protocol.RELEASE_ATTRIBUTES:
        with pytest.raises(request.RequestError) as info:
            request.check_jobspec_attributes({"qpu": "sv1", attribute: "x"})
        assert info.value.field == attribute


# --- memos --------------------------------------------------------------------------------


def test_held_memo_is_every_key_and_back():
    memo = HeldMemo(device="sv1,garnet", task=TASK, position=3, wait=40, state="QUEUED")
    assert memo.to_memo() == {
        "qpu_device": "sv1,garnet",
        "qpu_task": TASK,
        "qpu_position": 3,
        "qpu_wait": 40,
        "qpu_state": "QUEUED",
    }
    assert tuple(memo.to_memo()) == protocol.HELD_MEMO_KEYS
    assert HeldMemo.decode(memo.to_memo()) == memo
    # A key no longer known is sent as None, which clears it.
    assert HeldMemo(state="released").to_memo()["qpu_position"] is None


def test_held_memo_trusts_no_annotation():
    assert HeldMemo.decode(None) == HeldMemo() and HeldMemo.decode("x") == HeldMemo()
    odd = {"qpu_position": "3", "qpu_wait": True, "qpu_state": "", "qpu_task": 1, "other": 2}
    assert HeldMemo.decode(odd) == HeldMemo()
    assert HeldMemo.decode({"qpu_position": True, "qpu_wait": 1.5}) == HeldMemo(wait=1.5)


def test_the_other_memos():
    assert protocol.COST_MEMO == "qpu_cost"
    assert protocol.session_memo("batch", "ab12") == {"qpu_session": "batch ab12"}


# --- the C plugins' copies ---------------------------------------------------------------

# Every #define of qpu_protocol.h and the Python name it copies.
C_NAMES = {
    "QPU_SYSTEM_PREFIX": protocol.SYSTEM_PREFIX,
    "QPU_REQUEST_ATTR": protocol.REQUEST_ATTRIBUTE,
    "QPU_DEPENDENCY_SCHEME": protocol.DEPENDENCY_SCHEME,
    "QPU_TASK_ATTR": protocol.TASK_ATTRIBUTE,
    "QPU_DEVICE_ATTR": protocol.DEVICE_ATTRIBUTE,
    "QPU_INFO_ATTR": protocol.INFO_ATTRIBUTE,
    "QPU_INFO_VENDOR": "vendor",
    "QPU_INFO_TASKS": "tasks",
    "QPU_INFO_DEVICE_ID": "device_id",
    "QPU_INFO_RESERVATION": protocol.RESERVATION_INFO,
    "QPU_RESERVATION_ARN": "arn",
    "QPU_EVENT_PREFIX": "qpu-",
    "QPU_EVENT_RELEASE": events.RELEASE,
    "QPU_RELEASE_TASK": "task",
    "QPU_RELEASE_DEVICE": "device",
    "QPU_ENV_TASK": consumer.ENV_TASK,
    "QPU_ENV_TASKS": consumer.ENV_TASKS,
    "QPU_ENV_DEVICE": consumer.ENV_DEVICE,
    "QPU_ENV_VENDOR": consumer.ENV_VENDOR,
    "QPU_ENV_RESERVATION_DEVICE": protocol.RESERVATION_DEVICE_ENV,
    "QPU_ENV_RESERVATION_ARN": protocol.RESERVATION_ARN_ENV,
}


def header_names() -> dict[str, str]:
    text = HEADER.read_text()
    defines = re.findall(r"^#define\s+(QPU_\w+)\s+(.*?)\s*$", text, re.MULTILINE)
    names = {}
    for name, value in defines:
        assert re.fullmatch(r'"[^"\\]*"', value), f"{name} is not one string literal: {value}"
        names[name] = value[1:-1]
    return names


def test_the_header_names_are_the_python_names():
    assert header_names() == C_NAMES
    # The Python names the string-valued ones stand for.
    assert ReleaseInfo(vendor="v", tasks=("t",)).to_dict() == {
        C_NAMES["QPU_INFO_VENDOR"]: "v",
        C_NAMES["QPU_INFO_TASKS"]: ["t"],
    }
    assert events.Release(task="t", device="d").to_context() == {
        C_NAMES["QPU_RELEASE_TASK"]: "t",
        C_NAMES["QPU_RELEASE_DEVICE"]: "d",
    }
    assert all(name.startswith(C_NAMES["QPU_EVENT_PREFIX"]) for name in events.NAMES)


def _code(path: Path) -> str:
    """A C file without its comments."""
    return re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("source", C_SOURCES, ids=lambda p: p.name)
def test_the_plugins_spell_the_names_only_through_the_header(source):
    code = _code(source)
    uses = [name for name in C_NAMES if re.search(rf"\b{name}\b", code)]
    assert not uses or '#include "qpu_protocol.h"' in code, f"{source.name} uses {uses}"
    literals = re.findall(r'"((?:[^"\\\n]|\\.)*)"', code)
    # "qpu", "task", "vendor"... are words of messages and RPC keys too: only the names
    # nothing else could spell are looked for.
    common = (
        "QPU_REQUEST_ATTR",
        "QPU_DEPENDENCY_SCHEME",
        "QPU_INFO_VENDOR",
        "QPU_INFO_TASKS",
        "QPU_INFO_DEVICE_ID",
        "QPU_INFO_RESERVATION",
        "QPU_RESERVATION_ARN",
    )
    distinctive = [
        value
        for name, value in C_NAMES.items()
        if name not in common and not name.startswith("QPU_RELEASE_")
    ]
    spelled = sorted({v for v in distinctive for lit in literals if v in lit})
    assert spelled == [], f"{source.name} spells {spelled} itself: use qpu_protocol.h"
