"""Unit tier: which devices can run which program (``flux_quantum.selection.program_kinds``)."""

from __future__ import annotations

import json
from importlib import resources

from flux_quantum.protocol import programs
from flux_quantum.selection import program_kinds as pk
from flux_quantum.service.programs import DEFAULT_PROGRAM

PULSER = (
    resources.files("flux_quantum.vendors.pasqal").joinpath("samples/two_atoms.json").read_text()
)
IQM_JSON = json.dumps(
    {
        "name": "bell",
        "instructions": [
            {"name": "prx", "qubits": ["QB1"], "args": {"angle_t": 0.25, "phase_t": 0.25}},
            {"name": "cz", "qubits": ["QB1", "QB2"], "args": {}},
            {"name": "measure", "qubits": ["QB1", "QB2"], "args": {"key": "m"}},
        ],
    }
)


def test_kinds_are_told_apart_from_the_text_alone():
    assert programs.kind_of(DEFAULT_PROGRAM) == programs.OPENQASM
    assert programs.kind_of(None) == programs.OPENQASM
    assert programs.kind_of(PULSER) == programs.PULSER
    assert programs.kind_of(IQM_JSON) == programs.IQM_JSON
    assert programs.kind_of('{"circuits": []}') == programs.IQM_JSON
    assert programs.kind_of("{ not json") == programs.OPENQASM  # checked where it runs


def test_each_vendor_runs_only_its_kinds_and_says_so():
    for vendor in ("braket", "local", "ibm", "iqm"):
        assert pk.device_reason(vendor, programs.OPENQASM) is None
        assert pk.device_reason(vendor, programs.PULSER) is not None
    assert pk.device_reason("iqm", programs.IQM_JSON) is None
    assert pk.device_reason("ibm", programs.IQM_JSON) == (
        "takes OpenQASM circuits only (ibm), the program is an IQM JSON circuit"
    )
    assert pk.device_reason("pasqal", programs.OPENQASM) == (
        "takes Pulser sequences only (pasqal), the program is an OpenQASM circuit"
    )
    assert pk.device_reason("pasqal", programs.PULSER) is None


def test_vendor_checks_follow_the_kind():
    assert pk.program_reason("iqm", 20, DEFAULT_PROGRAM) is None
    assert pk.program_reason("iqm", 20, IQM_JSON) is None
    assert pk.program_reason("pasqal", 61, PULSER) is None
    # A register larger than the device, a circuit wider than it: the vendor's sentence.
    assert "more than the device's 1" in (pk.program_reason("pasqal", 1, PULSER) or "")
    assert pk.program_reason("iqm", 1, DEFAULT_PROGRAM) is not None
    assert pk.program_reason("braket", 1, PULSER) is not None
    assert pk.program_reason("pasqal", 61, None) is not None  # the default is OpenQASM
