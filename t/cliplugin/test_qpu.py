"""Unit tier for the CLI plugin of ``flux submit`` (flux_quantum/cliplugin/qpu.py).

What its hooks do to the ``--setattr`` list and the jobspec, with no Flux: the options
become ``qpu.KEY=VALUE`` entries, a short form mixed with keys becomes ``qpu.device``,
a key given twice and a bad request are refused with one sentence. The same file runs
inside Flux's own Python in t/cliplugin/test_qpu_flux.py.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import flux_quantum
from flux_quantum.cli.cliplugin import cli_plugin_comment, cli_plugin_path
from flux_quantum.cli.main import main
from flux_quantum.cliplugin import qpu as cliplugin
from flux_quantum.cliplugin.qpu import apply_options, check_jobspec, plan_setattr

PLUGIN = Path(cliplugin.__file__).resolve()
SHOTS = "must be an integer from 1 to 100000, got "


def opts(**given: object) -> dict[str, object]:
    return {dest: given.get(dest) for dest in cliplugin.DESTS}


def flux_nest(entries: list[str]) -> dict[str, Any]:
    """attributes.system as Flux builds it from --setattr entries (Jobspec.setattr)."""
    system: dict[str, Any] = {}
    for entry in entries:
        key, sep, text = entry.partition("=")
        value = cliplugin._flux_value(text if sep else None)
        path = key.removeprefix(".").removeprefix("attributes.").removeprefix("system.")
        parts = path.split(".")
        node = system
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value  # raises TypeError on a string, as Flux does
    return system


def test_the_plugin_sits_alone_in_its_directory() -> None:
    # Flux imports every *.py of a directory on FLUX_CLI_PLUGINPATH.
    assert cli_plugin_path() == PLUGIN
    assert sorted(p.name for p in PLUGIN.parent.glob("*.py")) == ["qpu.py"]


def test_plugin_imports_only_the_standard_library_flux_and_itself() -> None:
    tree = ast.parse(PLUGIN.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) - {"__future__"} == {"flux"}


def test_cli_plugin_path_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cli-plugin-path"]) == 0
    assert capsys.readouterr().out == f"{PLUGIN}\n"
    assert main(["cli-plugin-path", "--dir"]) == 0
    assert capsys.readouterr().out == f"{PLUGIN.parent}\n"
    assert Path(flux_quantum.__file__).resolve().parent == PLUGIN.parents[1]


def test_config_comment_says_how_to_load_it() -> None:
    comment = cli_plugin_comment()
    assert all(line.startswith("#") for line in comment.splitlines())
    assert f"ln -s {PLUGIN} $(flux config builtin confdir)/cli/plugins/" in comment
    assert f"FLUX_CLI_PLUGINPATH={PLUGIN.parent}\n" in comment


@pytest.mark.parametrize(
    ("entries", "given", "planned", "qpu"),
    [
        # what users type first: the short form and one key
        (
            ["qpu=local:local-forte1", "qpu.shots=10"],
            {},
            ["qpu.device=local:local-forte1", "qpu.shots=10"],
            {"device": "local:local-forte1", "shots": 10},
        ),
        # in either order
        (
            ["qpu.shots=10", "qpu=braket:sv1"],
            {},
            ["qpu.shots=10", "qpu.device=braket:sv1"],
            {"shots": 10, "device": "braket:sv1"},
        ),
        # every spelling of the key Flux accepts
        (
            ["system.qpu=sv1", "attributes.system.qpu.shots=5", ".system.qpu.policy=explicit"],
            {},
            [
                "system.qpu.device=sv1",
                "attributes.system.qpu.shots=5",
                ".system.qpu.policy=explicit",
            ],
            {"device": "sv1", "shots": 5, "policy": "explicit"},
        ),
        # a JSON string is the same device
        (['qpu="sv1"', "qpu.shots=5"], {}, ['qpu.device="sv1"', "qpu.shots=5"], None),
        # a table given whole next to keys: one entry per key, so no order loses any
        (
            ["qpu.shots=5", 'qpu={"device": "sv1", "release_at": 2}'],
            {},
            ["qpu.shots=5", 'qpu.device="sv1"', "qpu.release_at=2"],
            {"shots": 5, "device": "sv1", "release_at": 2},
        ),
        # options alone
        (
            ["user.note=x"],
            {"qpu": "ibm:any", "qpu_shots": "500", "qpu_release_at": "3"},
            ["user.note=x", 'qpu.device="ibm:any"', "qpu.shots=500", "qpu.release_at=3"],
            {"device": "ibm:any", "shots": 500, "release_at": 3},
        ),
        # options next to a short form: it becomes the device
        (
            ["qpu=sv1"],
            {"qpu_shots": "7", "qpu_max_wait": "30m"},
            ["qpu.device=sv1", "qpu.shots=7", "qpu.max_wait=30m"],
            {"device": "sv1", "shots": 7, "max_wait": "30m"},
        ),
        # a device, a policy and a program are strings whatever they look like
        (
            [],
            {"qpu": "1", "qpu_policy": "min-cost", "qpu_program": ["2"]},
            ['qpu.device="1"', 'qpu.program="2"', 'qpu.policy="min-cost"'],
            {"device": "1", "program": "2", "policy": "min-cost"},
        ),
        # --qpu-program repeated is a batch
        (
            [],
            {"qpu_program": ["a.qasm", "b c.qasm"]},
            ['qpu.program=["a.qasm", "b c.qasm"]'],
            {"program": ["a.qasm", "b c.qasm"]},
        ),
        # --qpu-opt reads VALUE as --setattr does
        (
            ["qpu.device=sv1"],
            {"qpu_opt": ["failover=next", "max_cost=2.5", 'group="7"', "class=qpu"]},
            [
                "qpu.device=sv1",
                "qpu.failover=next",
                "qpu.max_cost=2.5",
                'qpu.group="7"',
                "qpu.class=qpu",
            ],
            {"device": "sv1", "failover": "next", "max_cost": 2.5, "group": "7", "class": "qpu"},
        ),
    ],
)
def test_plan_setattr(
    entries: list[str], given: dict[str, object], planned: list[str], qpu: object
) -> None:
    assert plan_setattr(entries, opts(**given)) == planned
    if qpu is not None:
        assert flux_nest(planned)["qpu"] == qpu


@pytest.mark.parametrize(
    "entries",
    [
        [],
        ["qpu=sv1"],  # the short form alone stays as Flux reads it
        ['qpu={"device": "sv1"}', "queue=batch"],
        ["qpu=true"],  # refused later by the parser, not here
        ["^qpu=request.json", "qpu.shots=5"],  # from a file: Flux reads it
        ["user.qpu=sv1", "user.qpu.x=1"],  # not ours
        ["qpu_shots=5", "qpux=1"],
    ],
)
def test_plan_setattr_leaves_alone(entries: list[str]) -> None:
    assert plan_setattr(entries, opts()) == entries


@pytest.mark.parametrize(
    ("entries", "given", "message"),
    [
        (
            ["qpu=sv1"],
            {"qpu": "ibm:fez"},
            "--qpu and --setattr=qpu both set qpu.device; give it once",
        ),
        (
            ["qpu.device=sv1"],
            {"qpu": "sv1"},
            "--qpu and --setattr=qpu.device both set qpu.device; give it once",
        ),
        (
            ["qpu.shots=4"],
            {"qpu_shots": "3"},
            "--qpu-shots and --setattr=qpu.shots both set qpu.shots; give it once",
        ),
        (
            ['system.qpu={"shots": 4}'],
            {"qpu_shots": "3"},
            "--qpu-shots and --setattr=system.qpu both set qpu.shots; give it once",
        ),
        (
            [],
            {"qpu_shots": "3", "qpu_opt": ["shots=4"]},
            "--qpu-shots and --qpu-opt shots both set qpu.shots; give it once",
        ),
        (
            [],
            {"qpu_opt": ["policy=min-cost", "policy=min-wait"]},
            "--qpu-opt policy and --qpu-opt policy both set qpu.policy; give it once",
        ),
        (
            [],
            {"qpu_opt": ["shots"]},
            "--qpu-opt must be KEY=VALUE with a KEY from device, vendor, policy, shots,"
            " program, release_at, max_wait, max_cost, min_qubits, min_fidelity, class,"
            " failover, group, session, account, loop, reservation, reservation_end, merge, got 'shots'",
        ),
        (
            [],
            {"qpu_opt": ["release-at=running"]},
            "--qpu-opt must be KEY=VALUE with a KEY from device, vendor, policy, shots,"
            " program, release_at, max_wait, max_cost, min_qubits, min_fidelity, class,"
            " failover, group, session, account, loop, reservation, reservation_end, merge, got 'release-at=running'",
        ),
        (
            ["qpu=true", "qpu.shots=1"],
            {},
            "qpu must be 'any', DEVICE, VENDOR:DEVICE, VENDOR:any or a table of qpu.KEY"
            " values, got true",
        ),
        (
            ["qpu", "qpu.shots=1"],
            {},
            "qpu must be 'any', DEVICE, VENDOR:DEVICE, VENDOR:any or a table of qpu.KEY"
            " values, got 1",
        ),
    ],
)
def test_plan_setattr_refuses(entries: list[str], given: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        plan_setattr(entries, opts(**given))
    assert str(info.value) == message


def test_apply_options_is_a_no_op_after_preinit() -> None:
    given = opts(qpu="sv1", qpu_shots="10", qpu_program=["a.qasm", "b.qasm"])
    system = flux_nest(plan_setattr(["qpu.release_at=1"], given))
    jobspec = {"attributes": {"system": system}}
    before = json.dumps(jobspec)
    apply_options(jobspec, given)
    assert json.dumps(jobspec) == before


@pytest.mark.parametrize(
    ("qpu", "result"),
    [
        (None, {"device": "sv1", "shots": 10}),
        ("braket:any", None),  # replaced below: the options name the device
        ({"release_at": 1}, {"release_at": 1, "device": "sv1", "shots": 10}),
        ({"shots": 10}, {"shots": 10, "device": "sv1"}),
    ],
)
def test_apply_options_for_flux_python_api(qpu: object, result: object) -> None:
    # JobspecV1.from_submit(..., qpu="sv1", qpu_shots=10) calls preinit() after it
    # applied --setattr: the options go straight into the jobspec.
    given = opts(qpu="sv1", qpu_shots=10)
    jobspec: dict[str, Any] = {"attributes": {"system": {} if qpu is None else {"qpu": qpu}}}
    if result is None:
        with pytest.raises(ValueError) as info:
            apply_options(jobspec, given)
        assert (
            str(info.value) == "--qpu and attributes qpu.device both set qpu.device; give it once"
        )
        return
    apply_options(jobspec, given)
    assert jobspec["attributes"]["system"]["qpu"] == result


def test_apply_options_from_the_api_with_a_short_form() -> None:
    jobspec: dict[str, Any] = {"attributes": {"system": {"qpu": "braket:any"}}}
    apply_options(jobspec, opts(qpu_shots=5, qpu_program="a.qasm"))
    assert jobspec["attributes"]["system"]["qpu"] == {
        "device": "braket:any",
        "shots": 5,
        "program": "a.qasm",
    }


@pytest.mark.parametrize(
    ("system", "given", "message"),
    [
        ({"qpu": {"shots": "abc"}}, {"qpu_shots": "abc"}, "--qpu-shots " + SHOTS + "'abc'"),
        ({"qpu": {"shots": "abc"}}, {}, "qpu.shots " + SHOTS + "'abc'"),
        ({"qpu": {"shots": 0}}, {"qpu_opt": ["shots=0"]}, "qpu.shots " + SHOTS + "0"),
        (
            {"qpu": {"device": "SV1"}},
            {"qpu": "SV1"},
            "--qpu must be 'any' or a device named with lower-case letters, digits, '-', '_',"
            " '.' (at most 64, first a letter or digit), got 'SV1'",
        ),
        (
            {"qpu": {"device": "sv1", "policy": "min-cost"}},
            {"qpu": "sv1", "qpu_policy": "min-cost"},
            "--qpu-policy must be 'explicit' when qpu.device names a device, got 'min-cost'",
        ),
        (
            {"qpu": {"release_at": "soon"}},
            {"qpu_release_at": "soon"},
            "--qpu-release-at must be a queue position >= 0, 'running', 'predict' or 'done',"
            " got 'soon'",
        ),
        (
            {"qpu": {"max_wait": "forever"}},
            {"qpu_max_wait": "forever"},
            "--qpu-max-wait must be a duration > 0 such as 90, 90s, 30m, 2h or 1.5d, got 'forever'",
        ),
        (
            {"qpu": {"program": "[a.qasm,b.qasm]"}},
            {"qpu_program": ["[a.qasm,b.qasm]"]},
            '--qpu-program must be a file path or a JSON list of file paths like ["a.qasm",'
            "\"b.qasm\"], got '[a.qasm,b.qasm]'",
        ),
        (
            {"qpu": "sv1", "qpu_info": {}},
            {},
            "attributes.system.qpu_info is set by flux-quantum at release and may not be"
            " given at submit",
        ),
    ],
)
def test_check_jobspec_refuses_with_the_option_named(
    system: dict[str, Any], given: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        check_jobspec({"attributes": {"system": system}}, opts(**given))
    assert str(info.value) == message


@pytest.mark.parametrize(
    "jobspec",
    [
        {},
        {"attributes": {}},
        {"attributes": {"system": {"duration": 0}}},
        {"attributes": {"system": {"qpu": {"device": "sv1", "shots": 10}}}},
    ],
)
def test_check_jobspec_passes(jobspec: dict[str, Any]) -> None:
    check_jobspec(jobspec, opts(qpu="sv1"))
