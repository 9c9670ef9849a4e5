"""Unit tier for the ``qpu`` request model (flux_quantum.protocol.request).

Every malformed input is checked against its exact message, because that message is
what a user reads after ``flux submit``. The last test drives the ingest validator in a
real Flux instance and is skipped (with its reason) where ``flux`` is not on PATH.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shipped_vendors import NAMED

import flux_quantum.protocol.request as request_module
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.jobspec import RELEASE_ATTRIBUTES
from flux_quantum.protocol.request import (
    QpuRequest,
    RequestError,
    check_jobspec_attributes,
    format_duration,
    parse_duration,
    parse_request,
)

SRC = Path(request_module.__file__).resolve().parents[2]
ROOT = Path(__file__).resolve().parents[2]  # the repository (the package may be installed)
VALIDATOR = Path(request_module.__file__).parents[1] / "validator.py"

RULE = "lower-case letters, digits, '-', '_', '.' (at most 64, first a letter or digit)"
TOP = "qpu must be 'any', DEVICE, VENDOR:DEVICE, VENDOR:any or a table of qpu.KEY values, got "
FORMS = "qpu must be 'any', DEVICE, VENDOR:DEVICE or VENDOR:any, got "
DEV_FORMS = "qpu.device must be 'any', DEVICE, VENDOR:DEVICE or VENDOR:any, got "
NAME = f"qpu must be 'any' or a device named with {RULE}, got "
DEV_NAME = f"qpu.device must be 'any' or a device named with {RULE}, got "
VENDOR_PART = f"must be VENDOR:DEVICE with a VENDOR from {NAMED}, got "
VENDOR = f"qpu.vendor must be one of {NAMED}, got "
POLICY = "qpu.policy must be one of explicit, min-cost, min-queue, min-wait, max-fidelity, got "
SHOTS = "qpu.shots must be an integer from 1 to 100000, got "
PROGRAM = (
    'qpu.program must be a file path or a JSON list of file paths like ["a.qasm","b.qasm"], got '
)
RELEASE = "qpu.release_at must be a queue position >= 0, 'running', 'predict' or 'done', got "
WAIT = "qpu.max_wait must be a duration > 0 such as 90, 90s, 30m, 2h or 1.5d, got "
COST = "qpu.max_cost must be a number of US dollars >= 0, got "
QUBITS = "qpu.min_qubits must be an integer >= 1, got "
FIDELITY = "qpu.min_fidelity must be a probability > 0 and <= 1, got "
CLASS = "qpu.class must be one of qpu, simulator, got "
FAILOVER = "qpu.failover must be one of fail, next, simulator, got "
GROUP = f"qpu.group must be a name with {RULE}, got "
LOOP = f"qpu.loop must be a loop name with {RULE}, got "
RESERVATION = f"qpu.reservation must be 'none' or a reservation name with {RULE}, got "
RESERVATION_END = "qpu.reservation_end must be one of on-demand, fail, got "
KEYS = (
    " is unknown; the keys are device, vendor, policy, shots, program, release_at,"
    " max_wait, max_cost, min_qubits, min_fidelity, class, failover, group, session, account,"
    " loop, reservation, reservation_end, merge"
)

# (value of attributes.system.qpu, field named, exact message)
MALFORMED: list[tuple[object, str, str]] = [
    ({"reservation": "Forte AM"}, "qpu.reservation", RESERVATION + "'Forte AM'"),
    ({"reservation": 3}, "qpu.reservation", RESERVATION + "3"),
    ({"reservation_end": "public"}, "qpu.reservation_end", RESERVATION_END + "'public'"),
    ({"merge": "maybe"}, "qpu.merge", "qpu.merge must be one of yes, no, got 'maybe'"),
    ({"merge": False}, "qpu.merge", "qpu.merge must be one of yes, no, got false"),
    # top level: what --setattr=qpu=1, -S qpu, qpu=true, qpu=null give
    (1, "qpu", TOP + "1"),
    (0, "qpu", TOP + "0"),
    (True, "qpu", TOP + "true"),
    (False, "qpu", TOP + "false"),
    (None, "qpu", TOP + "null"),
    (2.5, "qpu", TOP + "2.5"),
    ([], "qpu", TOP + "[]"),
    (["sv1"], "qpu", TOP + '["sv1"]'),
    # short form
    ("", "qpu", FORMS + "''"),
    (":sv1", "qpu", FORMS + "':sv1'"),
    ("braket:", "qpu", FORMS + "'braket:'"),
    ("braket::sv1", "qpu", FORMS + "'braket::sv1'"),
    ("a:b:c", "qpu", FORMS + "'a:b:c'"),
    ("aws:sv1", "qpu", "qpu " + VENDOR_PART + "'aws:sv1'"),
    ("Braket:sv1", "qpu", "qpu " + VENDOR_PART + "'Braket:sv1'"),
    ("any:sv1", "qpu", "qpu " + VENDOR_PART + "'any:sv1'"),
    ("any:any", "qpu", "qpu " + VENDOR_PART + "'any:any'"),
    ("SV1", "qpu", NAME + "'SV1'"),
    ("ANY", "qpu", NAME + "'ANY'"),
    ("braket:SV1", "qpu", NAME + "'braket:SV1'"),
    (" sv1", "qpu", NAME + "' sv1'"),
    ("sv1 ", "qpu", NAME + "'sv1 '"),
    ("-sv1", "qpu", NAME + "'-sv1'"),
    (".sv1", "qpu", NAME + "'.sv1'"),
    ("_sv1", "qpu", NAME + "'_sv1'"),
    ("sv1/x", "qpu", NAME + "'sv1/x'"),
    ("sv 1", "qpu", NAME + "'sv 1'"),
    ("ärz", "qpu", NAME + "'ärz'"),
    ("sv1\n", "qpu", NAME + "'sv1\\n'"),
    ("x" * 65, "qpu", NAME + "'" + "x" * 35 + "...'"),
    ("braket:" + "x" * 65, "qpu", NAME + "'braket:" + "x" * 28 + "...'"),
    # device key
    ({"device": 5}, "qpu.device", DEV_FORMS + "5"),
    ({"device": None}, "qpu.device", DEV_FORMS + "null"),
    ({"device": ""}, "qpu.device", DEV_FORMS + "''"),
    ({"device": "ibm:"}, "qpu.device", DEV_FORMS + "'ibm:'"),
    ({"device": ["sv1"]}, "qpu.device", DEV_FORMS + '["sv1"]'),
    ({"device": "SV1"}, "qpu.device", DEV_NAME + "'SV1'"),
    ({"device": "aws:sv1"}, "qpu.device", "qpu.device " + VENDOR_PART + "'aws:sv1'"),
    # vendor key
    ({"vendor": "aws"}, "qpu.vendor", VENDOR + "'aws'"),
    ({"vendor": "Braket"}, "qpu.vendor", VENDOR + "'Braket'"),
    ({"vendor": "any"}, "qpu.vendor", VENDOR + "'any'"),
    ({"vendor": None}, "qpu.vendor", VENDOR + "null"),
    ({"vendor": 1}, "qpu.vendor", VENDOR + "1"),
    (
        {"device": "braket:sv1", "vendor": "ibm"},
        "qpu.vendor",
        "qpu.vendor must be 'braket' as in qpu.device 'braket:sv1', got 'ibm'",
    ),
    (
        {"vendor": "local", "device": "ibm:any"},
        "qpu.vendor",
        "qpu.vendor must be 'ibm' as in qpu.device 'ibm:any', got 'local'",
    ),
    # policy key
    ({"policy": "cheapest"}, "qpu.policy", POLICY + "'cheapest'"),
    ({"policy": "MIN-COST"}, "qpu.policy", POLICY + "'MIN-COST'"),
    ({"policy": ""}, "qpu.policy", POLICY + "''"),
    ({"policy": None}, "qpu.policy", POLICY + "null"),
    (
        {"policy": "explicit"},
        "qpu.policy",
        "qpu.policy must be min-cost, min-queue, min-wait or max-fidelity when no device is named,"
        " got 'explicit'",
    ),
    (
        {"device": "braket:any", "policy": "explicit"},
        "qpu.policy",
        "qpu.policy must be min-cost, min-queue, min-wait or max-fidelity when no device is named,"
        " got 'explicit'",
    ),
    (
        {"device": "sv1", "policy": "min-cost"},
        "qpu.policy",
        "qpu.policy must be 'explicit' when qpu.device names a device, got 'min-cost'",
    ),
    # shots key
    ({"shots": "abc"}, "qpu.shots", SHOTS + "'abc'"),
    ({"shots": True}, "qpu.shots", SHOTS + "true"),
    ({"shots": False}, "qpu.shots", SHOTS + "false"),
    ({"shots": 0}, "qpu.shots", SHOTS + "0"),
    ({"shots": -5}, "qpu.shots", SHOTS + "-5"),
    ({"shots": 100001}, "qpu.shots", SHOTS + "100001"),
    ({"shots": 500.0}, "qpu.shots", SHOTS + "500.0"),
    ({"shots": "500"}, "qpu.shots", SHOTS + "'500'"),
    ({"shots": None}, "qpu.shots", SHOTS + "null"),
    ({"shots": [500]}, "qpu.shots", SHOTS + "[500]"),
    ({"shots": 10**400}, "qpu.shots", SHOTS + "an integer of 1329 bits"),
    # program key
    ({"program": ""}, "qpu.program", PROGRAM + "''"),
    ({"program": []}, "qpu.program", PROGRAM + "[]"),
    ({"program": 5}, "qpu.program", PROGRAM + "5"),
    ({"program": None}, "qpu.program", PROGRAM + "null"),
    ({"program": ["a.qasm", 5]}, "qpu.program", PROGRAM + '["a.qasm", 5]'),
    ({"program": ["a.qasm", ""]}, "qpu.program", PROGRAM + '["a.qasm", ""]'),
    ({"program": "[a.qasm,b.qasm]"}, "qpu.program", PROGRAM + "'[a.qasm,b.qasm]'"),
    ({"program": "a\nb.qasm"}, "qpu.program", PROGRAM + "'a\\nb.qasm'"),
    ({"program": {"file": "a.qasm"}}, "qpu.program", PROGRAM + '{"file": "a.qasm"}'),
    ({"program": "p" * 4097}, "qpu.program", PROGRAM + "'" + "p" * 35 + "...'"),
    # release_at key
    ({"release_at": -1}, "qpu.release_at", RELEASE + "-1"),
    ({"release_at": "RUNNING"}, "qpu.release_at", RELEASE + "'RUNNING'"),
    ({"release_at": "soon"}, "qpu.release_at", RELEASE + "'soon'"),
    ({"release_at": "3"}, "qpu.release_at", RELEASE + "'3'"),
    ({"release_at": True}, "qpu.release_at", RELEASE + "true"),
    ({"release_at": 1.5}, "qpu.release_at", RELEASE + "1.5"),
    ({"release_at": None}, "qpu.release_at", RELEASE + "null"),
    # max_wait key
    ({"max_wait": 0}, "qpu.max_wait", WAIT + "0"),
    ({"max_wait": -1}, "qpu.max_wait", WAIT + "-1"),
    ({"max_wait": "0s"}, "qpu.max_wait", WAIT + "'0s'"),
    ({"max_wait": "-5m"}, "qpu.max_wait", WAIT + "'-5m'"),
    ({"max_wait": "5 m"}, "qpu.max_wait", WAIT + "'5 m'"),
    ({"max_wait": "soon"}, "qpu.max_wait", WAIT + "'soon'"),
    ({"max_wait": "10x"}, "qpu.max_wait", WAIT + "'10x'"),
    ({"max_wait": "1e3"}, "qpu.max_wait", WAIT + "'1e3'"),
    ({"max_wait": "inf"}, "qpu.max_wait", WAIT + "'inf'"),
    ({"max_wait": "9" * 400 + "d"}, "qpu.max_wait", WAIT + "'" + "9" * 35 + "...'"),
    ({"max_wait": math.nan}, "qpu.max_wait", WAIT + "NaN"),
    ({"max_wait": math.inf}, "qpu.max_wait", WAIT + "Infinity"),
    ({"max_wait": True}, "qpu.max_wait", WAIT + "true"),
    ({"max_wait": None}, "qpu.max_wait", WAIT + "null"),
    # max_cost key
    ({"max_cost": -0.01}, "qpu.max_cost", COST + "-0.01"),
    ({"max_cost": "5"}, "qpu.max_cost", COST + "'5'"),
    ({"max_cost": "$5"}, "qpu.max_cost", COST + "'$5'"),
    ({"max_cost": True}, "qpu.max_cost", COST + "true"),
    ({"max_cost": math.inf}, "qpu.max_cost", COST + "Infinity"),
    ({"max_cost": 10**400}, "qpu.max_cost", COST + "an integer of 1329 bits"),
    ({"max_cost": None}, "qpu.max_cost", COST + "null"),
    # min_qubits key
    ({"min_qubits": 0}, "qpu.min_qubits", QUBITS + "0"),
    ({"min_qubits": 2.0}, "qpu.min_qubits", QUBITS + "2.0"),
    ({"min_qubits": "20"}, "qpu.min_qubits", QUBITS + "'20'"),
    ({"min_qubits": True}, "qpu.min_qubits", QUBITS + "true"),
    ({"min_qubits": None}, "qpu.min_qubits", QUBITS + "null"),
    # min_fidelity key
    ({"min_fidelity": 0}, "qpu.min_fidelity", FIDELITY + "0"),
    ({"min_fidelity": 1.01}, "qpu.min_fidelity", FIDELITY + "1.01"),
    ({"min_fidelity": -0.5}, "qpu.min_fidelity", FIDELITY + "-0.5"),
    ({"min_fidelity": "0.9"}, "qpu.min_fidelity", FIDELITY + "'0.9'"),
    ({"min_fidelity": True}, "qpu.min_fidelity", FIDELITY + "true"),
    ({"min_fidelity": math.nan}, "qpu.min_fidelity", FIDELITY + "NaN"),
    ({"min_fidelity": None}, "qpu.min_fidelity", FIDELITY + "null"),
    # class key
    ({"class": "sim"}, "qpu.class", CLASS + "'sim'"),
    ({"class": "QPU"}, "qpu.class", CLASS + "'QPU'"),
    ({"class": None}, "qpu.class", CLASS + "null"),
    # failover key
    ({"failover": "retry"}, "qpu.failover", FAILOVER + "'retry'"),
    ({"failover": True}, "qpu.failover", FAILOVER + "true"),
    ({"failover": None}, "qpu.failover", FAILOVER + "null"),
    # group key
    ({"group": "My Group"}, "qpu.group", GROUP + "'My Group'"),
    ({"group": ""}, "qpu.group", GROUP + "''"),
    ({"group": 7}, "qpu.group", GROUP + "7"),
    ({"group": "g" * 65}, "qpu.group", GROUP + "'" + "g" * 35 + "...'"),
    ({"group": None}, "qpu.group", GROUP + "null"),
    (
        {"session": "exclusive"},
        "qpu.session",
        "qpu.session must be one of dedicated, batch, got 'exclusive'",
    ),
    ({"session": True}, "qpu.session", "qpu.session must be one of dedicated, batch, got true"),
    # loop key: a name, as for qpu.group
    ({"loop": "Loop 1"}, "qpu.loop", LOOP + "'Loop 1'"),
    ({"loop": ""}, "qpu.loop", LOOP + "''"),
    ({"loop": 3}, "qpu.loop", LOOP + "3"),
    ({"loop": None}, "qpu.loop", LOOP + "null"),
    # account key
    ({"account": "mine"}, "qpu.account", "qpu.account must be one of site, user, got 'mine'"),
    ({"account": None}, "qpu.account", "qpu.account must be one of site, user, got null"),
    # unknown keys: the first in sorted order is named
    ({"foo": 1}, "qpu.foo", "qpu.foo" + KEYS),
    ({"Shots": 500}, "qpu.Shots", "qpu.Shots" + KEYS),
    ({"release-at": 1}, "qpu.release-at", "qpu.release-at" + KEYS),
    ({"device_class": "qpu"}, "qpu.device_class", "qpu.device_class" + KEYS),
    ({"zeta": 1, "max_wait": 5, "alpha": 2}, "qpu.alpha", "qpu.alpha" + KEYS),
    ({"k" * 300: 1}, "qpu." + "k" * 22 + "...", "qpu." + "k" * 22 + "..." + KEYS),
    ({"bad\nkey": 1}, "qpu.bad\\nkey", "qpu.bad\\nkey" + KEYS),
]


def test_enough_malformed_cases() -> None:
    assert len(MALFORMED) >= 60
    assert len({repr(value) for value, _, _ in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize(
    ("value", "field", "message"),
    MALFORMED,
    ids=[f"{field}={value!r:.40}" for value, field, _ in MALFORMED],
)
def test_malformed_request_is_rejected_with_exact_message(
    value: object, field: str, message: str
) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(value)
    assert str(info.value) == message
    assert info.value.field == field
    # One short line: Flux prints it after "[Errno 22] " on the user's terminal.
    assert len(message) < 240  # the longest lists every key
    assert "\n" not in message
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FluxQuantumError)


@pytest.mark.parametrize(
    ("table", "first_field"),
    [
        ({"shots": 0, "device": "SV1"}, "qpu.device"),
        ({"device": "SV1", "shots": 0}, "qpu.device"),
        ({"group": "A", "shots": 0, "failover": "x"}, "qpu.shots"),
        ({"failover": "x", "group": "A"}, "qpu.failover"),
        ({"shots": 0, "nope": 1}, "qpu.nope"),
    ],
)
def test_first_error_does_not_depend_on_key_order(table: dict, first_field: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(table)
    assert info.value.field == first_field


# (short form, device, vendor, policy)
SHORT_FORMS = [
    ("any", None, None, "min-wait"),
    ("sv1", "sv1", None, "explicit"),
    ("braket:sv1", "sv1", "braket", "explicit"),
    ("ibm:ibm_brisbane", "ibm_brisbane", "ibm", "explicit"),
    ("local:qasm-sim.v2", "qasm-sim.v2", "local", "explicit"),
    ("braket:any", None, "braket", "min-wait"),
    ("0", "0", None, "explicit"),
    ("x" * 64, "x" * 64, None, "explicit"),
]


@pytest.mark.parametrize(("text", "device", "vendor", "policy"), SHORT_FORMS)
def test_short_form(text: str, device: str | None, vendor: str | None, policy: str) -> None:
    request = parse_request(text)
    assert (request.device, request.vendor, request.policy) == (device, vendor, policy)
    assert request.target == text
    assert parse_request(request.to_attr()) == request
    # A short form sets nothing but the target.
    assert dataclasses.replace(request, device=None, vendor=None, policy="") == QpuRequest()


def test_defaults() -> None:
    request = parse_request("braket:sv1")
    assert request == QpuRequest(
        device="sv1",
        vendor="braket",
        policy="explicit",
        shots=1000,
        program=(),
        release_at="done",
        max_wait=None,
        max_cost=None,
        min_qubits=None,
        min_fidelity=None,
        device_class=None,
        failover="fail",
        group=None,
        session=None,
        account="site",
        loop=None,
        reservation=None,
        reservation_end=None,
    )
    assert parse_request({}) == parse_request("any")
    assert parse_request({}).policy == "min-wait"
    assert parse_request({"device": "sv1"}).policy == "explicit"
    assert [f.name for f in dataclasses.fields(QpuRequest)] == [
        "device",
        "vendor",
        "policy",
        "shots",
        "program",
        "release_at",
        "max_wait",
        "max_cost",
        "min_qubits",
        "min_fidelity",
        "device_class",
        "failover",
        "group",
        "session",
        "account",
        "loop",
        "reservation",
        "reservation_end",
        "merge",
    ]


# (table, the fields it should set apart from the defaults)
TABLE_FORMS: list[tuple[dict, dict]] = [
    ({"device": "sv1"}, {"device": "sv1", "policy": "explicit"}),
    ({"device": "any"}, {}),
    ({"device": "braket:sv1"}, {"device": "sv1", "vendor": "braket", "policy": "explicit"}),
    ({"device": "ibm:any"}, {"vendor": "ibm"}),
    ({"device": "braket:sv1", "vendor": "braket"}, {"device": "sv1", "vendor": "braket"}),
    ({"device": "sv1", "vendor": "braket"}, {"device": "sv1", "vendor": "braket"}),
    ({"vendor": "local"}, {"vendor": "local"}),
    ({"device": "sv1", "policy": "explicit"}, {"device": "sv1"}),
    ({"policy": "min-cost"}, {"policy": "min-cost"}),
    ({"policy": "min-queue"}, {"policy": "min-queue"}),
    ({"policy": "min-wait"}, {"policy": "min-wait"}),
    ({"shots": 1}, {"shots": 1}),
    ({"shots": 100000}, {"shots": 100000}),
    ({"program": "qaoa.qasm"}, {"program": ("qaoa.qasm",)}),
    ({"program": ["a.qasm", "b.qasm"]}, {"program": ("a.qasm", "b.qasm")}),
    ({"program": ["/abs/dir with space/c.qasm"]}, {"program": ("/abs/dir with space/c.qasm",)}),
    ({"release_at": 0}, {"release_at": 0}),
    ({"release_at": 25}, {"release_at": 25}),
    ({"release_at": "running"}, {"release_at": "running"}),
    ({"max_wait": 90}, {"max_wait": 90.0}),
    ({"max_wait": 0.5}, {"max_wait": 0.5}),
    ({"max_wait": "30m"}, {"max_wait": 1800.0}),
    ({"max_cost": 0}, {"max_cost": 0.0}),
    ({"max_cost": 12.5}, {"max_cost": 12.5}),
    ({"min_qubits": 1}, {"min_qubits": 1}),
    ({"min_qubits": 127}, {"min_qubits": 127}),
    ({"min_fidelity": 1}, {"min_fidelity": 1.0}),
    ({"min_fidelity": 0.25}, {"min_fidelity": 0.25}),
    ({"policy": "max-fidelity"}, {"policy": "max-fidelity"}),
    ({"class": "qpu"}, {"device_class": "qpu"}),
    ({"class": "simulator"}, {"device_class": "simulator"}),
    ({"failover": "fail"}, {"failover": "fail"}),
    ({"failover": "next"}, {"failover": "next"}),
    ({"failover": "simulator"}, {"failover": "simulator"}),
    ({"group": "sweep-7"}, {"group": "sweep-7"}),
    ({"session": "batch"}, {"session": "batch"}),
    ({"loop": "loop-0a1b2c3d"}, {"loop": "loop-0a1b2c3d"}),
    (
        {
            "device": "braket:any",
            "policy": "min-cost",
            "shots": 500,
            "program": ["a.qasm", "b.qasm", "c.qasm"],
            "release_at": "running",
            "max_wait": "2h",
            "max_cost": 3,
            "min_qubits": 20,
            "class": "qpu",
            "failover": "next",
            "group": "g1",
        },
        {
            "vendor": "braket",
            "policy": "min-cost",
            "shots": 500,
            "program": ("a.qasm", "b.qasm", "c.qasm"),
            "release_at": "running",
            "max_wait": 7200.0,
            "max_cost": 3.0,
            "min_qubits": 20,
            "device_class": "qpu",
            "failover": "next",
            "group": "g1",
        },
    ),
]


@pytest.mark.parametrize(
    ("table", "changes"), TABLE_FORMS, ids=[f"{table!r:.50}" for table, _ in TABLE_FORMS]
)
def test_table_form_round_trip(table: dict, changes: dict) -> None:
    request = parse_request(table)
    assert request == QpuRequest(**changes)
    attr = request.to_attr()
    assert parse_request(attr) == request
    # The canonical form travels as JSON in the jobspec.
    assert parse_request(json.loads(json.dumps(attr))) == request
    assert request.to_attr() == parse_request(attr).to_attr()


def test_to_attr_is_canonical() -> None:
    assert parse_request("sv1").to_attr() == {
        "device": "sv1",
        "policy": "explicit",
        "shots": 1000,
        "release_at": "done",
        "failover": "fail",
    }
    request = parse_request(
        {
            "device": "ibm:any",
            "program": "q.qasm",
            "max_wait": "1.5d",
            "max_cost": 2,
            "min_qubits": 5,
            "class": "simulator",
            "group": "g",
        }
    )
    assert request.to_attr() == {
        "vendor": "ibm",
        "policy": "min-wait",
        "shots": 1000,
        "program": ["q.qasm"],
        "release_at": "done",
        "max_wait": 129600.0,
        "max_cost": 2.0,
        "min_qubits": 5,
        "class": "simulator",
        "failover": "fail",
        "group": "g",
    }


def test_flux_setattr_json_values_parse() -> None:
    # What `flux submit --setattr=qpu.device=sv1 --setattr=qpu.shots=500
    # --setattr=qpu.program=qaoa.qasm` puts in attributes.system.qpu after json.loads.
    values = {"device": "sv1", "shots": json.loads("500"), "program": "qaoa.qasm"}
    request = parse_request(values)
    assert (request.device, request.shots, request.program) == ("sv1", 500, ("qaoa.qasm",))
    assert request.describe() == "sv1 shots=500 release_at=done program=qaoa.qasm"


DURATIONS = [
    (90, 90.0),
    (1.5, 1.5),
    ("90", 90.0),
    ("90s", 90.0),
    ("500ms", 0.5),
    ("30m", 1800.0),
    ("2h", 7200.0),
    ("1.5d", 129600.0),
    (".5h", 1800.0),
    ("2.", 2.0),
]


@pytest.mark.parametrize(("given", "seconds"), DURATIONS)
def test_max_wait_durations(given: object, seconds: float) -> None:
    assert parse_duration(given) == seconds
    request = parse_request({"max_wait": given})
    assert request.max_wait == seconds
    assert isinstance(request.max_wait, float)
    assert parse_request(request.to_attr()) == request


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(90.0, "90s"), (0.5, "0.5s"), (1800.0, "30m"), (5400.0, "90m"), (7200.0, "2h"),
     (129600.0, "36h"), (86400.0, "1d"), (172800.0, "2d"), (61.0, "61s")],
)  # fmt: skip
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("braket:sv1", "braket:sv1 shots=1000 release_at=done"),
        ("sv1", "sv1 shots=1000 release_at=done"),
        ("any", "any policy=min-wait shots=1000 release_at=done"),
        ("ibm:any", "ibm:any policy=min-wait shots=1000 release_at=done"),
        (
            {"device": "ibm:any", "policy": "min-cost", "release_at": "running"},
            "ibm:any policy=min-cost shots=1000 release_at=running",
        ),
        (
            {"device": "sv1", "shots": 500, "program": ["a.qasm", "b.qasm"], "group": "g1"},
            "sv1 shots=500 release_at=done group=g1 programs=2",
        ),
        (
            {"device": "ibm:fez", "session": "dedicated", "loop": "vqe.1"},
            "ibm:fez shots=1000 release_at=done session=dedicated loop=vqe.1",
        ),
        (
            {
                "class": "qpu",
                "min_qubits": 20,
                "max_cost": 2.5,
                "max_wait": "90m",
                "failover": "simulator",
                "release_at": 0,
            },
            "any policy=min-wait shots=1000 release_at=0 class=qpu min_qubits=20 max_cost=2.5"
            " max_wait=90m failover=simulator",
        ),
        (
            {"policy": "max-fidelity", "class": "qpu", "min_fidelity": 0.8, "max_cost": 5},
            "any policy=max-fidelity shots=1000 release_at=done class=qpu min_fidelity=0.8"
            " max_cost=5",
        ),
    ],
)
def test_describe(value: object, line: str) -> None:
    assert parse_request(value).describe() == line


def test_request_is_frozen_and_hashable() -> None:
    request = parse_request({"device": "sv1", "program": ["a.qasm"]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.shots = 5  # type: ignore[misc]
    assert len({request, parse_request({"device": "sv1", "program": "a.qasm"})}) == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"shots": 0}, SHOTS + "0"),
        ({"device": "braket:sv1"}, f"qpu.device must be a device name with {RULE}, got 'braket:sv1'"),
        ({"vendor": "aws"}, VENDOR + "'aws'"),
        (
            {"policy": "explicit"},
            "qpu.policy must be min-cost, min-queue, min-wait or max-fidelity when no device is named,"
            " got 'explicit'",
        ),
        ({"program": []}, PROGRAM + "[]"),
        ({"max_wait": "soon"}, WAIT + "'soon'"),
        ({"device_class": "sim"}, CLASS + "'sim'"),
        ({"group": "G"}, GROUP + "'G'"),
        ({"loop": "L1"}, LOOP + "'L1'"),
    ],
)  # fmt: skip
def test_constructor_checks_like_the_parser(fields: dict, message: str) -> None:
    # Code that builds a request by hand (policy, tests) cannot make an invalid one.
    with pytest.raises(RequestError) as info:
        QpuRequest(**fields)
    assert str(info.value) == message


def test_constructor_normalizes() -> None:
    request = QpuRequest(device="sv1", program="a.qasm", max_wait="2h", max_cost=1)  # type: ignore[arg-type]
    assert request.program == ("a.qasm",)
    assert request.max_wait == 7200.0
    assert request.max_cost == 1.0 and isinstance(request.max_cost, float)
    assert request.policy == "explicit"


# attributes.system as the validator sees it
def test_check_jobspec_attributes_passes_jobs_without_qpu() -> None:
    assert check_jobspec_attributes({}) is None
    assert check_jobspec_attributes({"duration": 0, "cwd": "/tmp", "queue": "q"}) is None


def test_check_jobspec_attributes_parses_qpu() -> None:
    system = {"duration": 0, "qpu": {"device": "braket:sv1", "shots": 500}}
    assert check_jobspec_attributes(system) == QpuRequest(device="sv1", vendor="braket", shots=500)
    assert check_jobspec_attributes({"qpu": "any"}) == QpuRequest()


def test_check_jobspec_attributes_rejects_bad_qpu() -> None:
    with pytest.raises(RequestError) as info:
        check_jobspec_attributes({"qpu": {"shots": "abc"}})
    assert str(info.value) == SHOTS + "'abc'"
    with pytest.raises(RequestError) as info:
        check_jobspec_attributes({"qpu": 1})
    assert str(info.value) == TOP + "1"


RELEASE_WRITES = re.compile(r"QPU_SYSTEM_PREFIX\s+(QPU_\w+)")
HEADER_NAMES = re.compile(r'^#define\s+(QPU_\w+)\s+"([^"]*)"', re.MULTILINE)


def test_every_attribute_the_plugin_writes_at_release_is_reserved() -> None:
    # The plugin's release (jobtap/quantum_services.c) is the one writer of
    # attributes.system at release; it spells the keys with jobtap/qpu_protocol.h's names
    # (test_protocol.py checks those). No other file of the plugin writes one.
    names = dict(HEADER_NAMES.findall((ROOT / "jobtap" / "qpu_protocol.h").read_text()))
    writers = [
        path.name
        for path in sorted((ROOT / "jobtap").glob("quantum*.c"))
        if RELEASE_WRITES.search(path.read_text())
    ]
    assert writers == ["quantum_services.c"]
    code = (ROOT / "jobtap" / "quantum_services.c").read_text()
    written = {names[name] for name in RELEASE_WRITES.findall(code)}
    assert written == set(RELEASE_ATTRIBUTES) == {"qpu_task", "qpu_device", "qpu_info"}
    assert written <= set(request_module.RESERVED_ATTRIBUTES)


@pytest.mark.parametrize("key", RELEASE_ATTRIBUTES)
@pytest.mark.parametrize("qpu", [None, "sv1", {"shots": "abc"}])
@pytest.mark.parametrize("value", ["arn:aws:braket:::task/x", {"tasks": ["x"]}, ""])
def test_check_jobspec_attributes_rejects_reserved_keys(
    key: str, qpu: object, value: object
) -> None:
    system: dict[str, object] = {key: value}
    if qpu is not None:
        system["qpu"] = qpu
    with pytest.raises(RequestError) as info:
        check_jobspec_attributes(system)
    assert str(info.value) == (
        f"attributes.system.{key} is set by flux-quantum at release and may not be given at submit"
    )
    assert info.value.field == key


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "qpu_shots",
            "attributes.system.qpu_shots is reserved for flux-quantum and may not be given"
            " at submit (did you mean qpu.shots?)",
        ),
        (
            "qpu_release_at",
            "attributes.system.qpu_release_at is reserved for flux-quantum and may not be"
            " given at submit (did you mean qpu.release_at?)",
        ),
        (
            "qpu_cost",
            "attributes.system.qpu_cost is reserved for flux-quantum and may not be given"
            " at submit",
        ),
        (
            "qpu_" + "x" * 60,
            "attributes.system.qpu_" + "x" * 31 + "... is reserved for flux-quantum and may"
            " not be given at submit",
        ),
    ],
)
def test_check_jobspec_attributes_rejects_other_qpu_keys(key: str, message: str) -> None:
    for qpu in (None, "sv1"):
        system: dict[str, object] = {key: 1} if qpu is None else {key: 1, "qpu": qpu}
        with pytest.raises(RequestError) as info:
            check_jobspec_attributes(system)
        assert str(info.value) == message
        assert info.value.field == key


def test_check_jobspec_attributes_names_a_written_attribute_first() -> None:
    with pytest.raises(RequestError) as info:
        check_jobspec_attributes({"qpu_aaa": 1, "qpu_info": {}, "qpu": "sv1"})
    assert info.value.field == "qpu_info"
    with pytest.raises(RequestError) as info:
        check_jobspec_attributes({"qpu_zz": 1, "qpu_b": 2})
    assert info.value.field == "qpu_b"


def test_check_jobspec_attributes_leaves_other_attributes_alone() -> None:
    system = {"qpu": "sv1", "qpux": 1, "QPU_TASK": 1, "user_qpu_task": 1, "queue": "batch"}
    assert check_jobspec_attributes(system) == QpuRequest(device="sv1")


def test_request_module_uses_only_the_standard_library() -> None:
    # The validator imports it inside Flux's Python, which has no third-party packages.
    tree = ast.parse(Path(request_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    outside = imported - set(sys.stdlib_module_names) - {"__future__", "flux_quantum"}
    assert outside == set()
    # And the package import chain it pulls in works with no site-packages at all.
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({str(SRC)!r}); import flux_quantum.protocol.request as r;"
         " print(r.parse_request('braket:sv1').describe())"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "braket:sv1 shots=1000 release_at=done"


FLUX = shutil.which("flux")

FLUX_SCRIPT = """\
flux submit --setattr=qpu.shots=abc true; echo "rc=$?"
flux submit --setattr=qpu_task=x true; echo "rc=$?"
flux submit -S qpu=braket:SV1 true; echo "rc=$?"
flux submit --setattr=qpu=braket:sv1 true >/dev/null; echo "rc=$?"
flux submit --setattr=qpu.device=sv1 --setattr=qpu.shots=500 true >/dev/null; echo "rc=$?"
flux submit true >/dev/null; echo "rc=$?"
echo "jobs=$(flux jobs -a -n -o '{id}' | wc -l)"
flux python -c 'import flux_quantum' >/dev/null 2>&1; echo "broker-python-has-flux_quantum=$?"
"""


@pytest.mark.flux  # conftest.py skips it, loudly, where flux is not on PATH
def test_validator_in_real_flux(tmp_path: Path) -> None:
    assert FLUX is not None
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "validator.toml").write_text(
        f'[ingest.validator]\nplugins = ["jobspec", "{VALIDATOR}"]\n'
    )
    script = tmp_path / "check.sh"
    script.write_text(FLUX_SCRIPT)
    # No PYTHONPATH: the validator must find flux_quantum next to itself.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [FLUX, "start", "--test-size=1", "-c", str(conf), "sh", str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines() + result.stderr.splitlines()
    assert "[Errno 22] " + SHOTS + "'abc'" in lines
    assert (
        "[Errno 22] attributes.system.qpu_task is set by flux-quantum at release"
        " and may not be given at submit"
    ) in lines
    assert "[Errno 22] " + NAME + "'braket:SV1'" in lines
    rcs = [line for line in result.stdout.splitlines() if line.startswith("rc=")]
    assert rcs == ["rc=1", "rc=1", "rc=1", "rc=0", "rc=0", "rc=0"]
    # Rejected jobs were never queued: only the three good ones exist.
    assert "jobs=3" in result.stdout
    # The case the sys.path fallback exists for (if this fails, the test proves less).
    assert "broker-python-has-flux_quantum=1" in result.stdout


def test_vendor_credentials_in_the_submit_environment_are_named():
    from flux_quantum.protocol.request import credential_refusal, credential_variables

    system = {
        "environment": {
            "PATH": "/bin",
            "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_ACCESS_KEY_ID": "AKIA",  # an id, not a secret
            "ibm_kingston_QRMI_IBM_QCS_IAM_APIKEY": "y",
            "QRMI_JOB_ACQUISITION_TOKEN": "z",
            "IONQ_API_KEY": "k",
            "IONQ_API_URL": "https://api.ionq.co/v0.4",  # where, not a secret
        }
    }
    names = credential_variables(system)
    assert names == [
        "AWS_SECRET_ACCESS_KEY",
        "IONQ_API_KEY",
        "QRMI_JOB_ACQUISITION_TOKEN",
        "ibm_kingston_QRMI_IBM_QCS_IAM_APIKEY",
    ]
    message = credential_refusal(names)
    assert "--env=-AWS_SECRET_ACCESS_KEY --env=-IONQ_API_KEY --env=-QRMI_JOB" in message
    assert "x" not in message.split("holds")[0]  # names only, never values
    assert credential_variables({"environment": {"HOME": "/h"}}) == []
    assert credential_variables({}) == []


def test_a_reservation_round_trips_and_none_names_no_window() -> None:
    request = parse_request({"reservation": "forte-am", "reservation_end": "fail"})
    assert request.named_reservation == "forte-am"
    assert parse_request(request.to_attr()) == request
    assert "reservation=forte-am reservation_end=fail" in request.describe()
    assert parse_request({"reservation": "none"}).named_reservation is None
    assert parse_request("any").named_reservation is None
