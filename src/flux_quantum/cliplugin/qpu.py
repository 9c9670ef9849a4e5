"""Flux CLI plugin: ``flux submit --qpu=DEVICE --qpu-shots=N ...``, checked before sending.

Options provided by flux-quantum (``flux submit``, ``run``, ``batch``, ``alloc``,
``bulksubmit``):

  --qpu=DEVICE              qpu.device: any, DEVICE, VENDOR:DEVICE or VENDOR:any
  --qpu-shots=N             qpu.shots
  --qpu-program=FILE        qpu.program (repeat it for a batch of programs)
  --qpu-policy=POLICY       qpu.policy
  --qpu-release-at=WHEN     qpu.release_at: a queue position, running, done or predict
  --qpu-max-wait=DURATION   qpu.max_wait: seconds or a Flux Standard Duration (30m, 2h)
  --qpu-opt=KEY=VALUE       any other qpu.KEY, VALUE read as JSON first like --setattr

Each option sets one key of the job's ``qpu`` request (``attributes.system.qpu``), the
same keys ``--setattr=qpu.KEY=VALUE`` sets; a key given both ways is refused. The short
form ``--setattr=qpu=DEVICE`` may be combined with ``qpu.KEY`` settings and with these
options: it is read as ``qpu.device=DEVICE``. Before the job is sent, the whole request
is checked by flux-quantum's one parser; a bad value stops flux submit with one sentence
naming the option or key. The instance's ingest validator checks it again.

Flux loads this file from ``FLUX_CLI_PLUGINPATH`` (``export FLUX_CLI_PLUGINPATH=$(flux
quantum cli-plugin-path --dir)``) or from a link in ``{confdir}/cli/plugins`` (``ln -s
$(flux quantum cli-plugin-path) $(flux config builtin confdir)/cli/plugins/flux-quantum.py``).
Every key and its values: docs/requests.md of flux-quantum.
"""

# This file runs inside Flux's own Python (flux-core's bindings, a distribution's
# python3), not flux-quantum's: like validator.py it imports only the standard library,
# Flux's bindings and the flux_quantum package next to it, which it loads by path
# without adding anything to sys.path (a venv's site-packages must never reach Flux's
# interpreter); the registry of vendors loads, the same way, the descriptors of the
# vendors installed beside that package (standard library only, every one). It lives
# alone in its directory because Flux imports every *.py file of a directory on
# FLUX_CLI_PLUGINPATH.
#
# Where: flux-core 0.88 calls preinit() after parsing options and before building the
# jobspec, then applies --setattr, then calls modify_jobspec() (flux.cli.base
# MiniCmd.jobspec_create, flux.job.Jobspec.apply_options). So preinit() turns the
# options into qpu.KEY=VALUE --setattr entries (and rewrites a short form mixed with
# keys into qpu.device=DEVICE) before Flux applies them, and modify_jobspec() checks the
# finished jobspec. Options reach modify_jobspec() only on the plain path: with --cc or
# in bulksubmit Flux hands plugins a namespace without them, but --setattr survives.

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    from flux.cli.plugin import CLIPlugin
except (ImportError, OSError):  # imported outside Flux (the unit tier): the functions work
    CLIPlugin = object

PACKAGE = "flux_quantum"
WARNED = "_flux_quantum_cli_plugin_warned"

# (option, argparse dest, qpu table key, value read as JSON first like --setattr)
OPTIONS: tuple[tuple[str, str, str, bool], ...] = (
    ("--qpu", "qpu", "device", False),
    ("--qpu-shots", "qpu_shots", "shots", True),
    ("--qpu-program", "qpu_program", "program", False),
    ("--qpu-policy", "qpu_policy", "policy", False),
    ("--qpu-release-at", "qpu_release_at", "release_at", True),
    ("--qpu-max-wait", "qpu_max_wait", "max_wait", True),
)
OPT_OPTION = "--qpu-opt"
OPT_DEST = "qpu_opt"
DESTS: tuple[str, ...] = tuple(dest for _, dest, _, _ in OPTIONS) + (OPT_DEST,)
# Set on the options namespace once preinit() has rewritten its --setattr list.
DONE_MARK = "qpu_setattr_planned"

HELP = {
    "--qpu": "Ask for a QPU: any, DEVICE, VENDOR:DEVICE or VENDOR:any (qpu.device)",
    "--qpu-shots": "Shots of the job's quantum task, 1 to 100000 (qpu.shots)",
    "--qpu-program": "OpenQASM 3 program of the task; repeat for a batch (qpu.program)",
    "--qpu-policy": "Device choice: explicit, min-cost, min-queue, min-wait or max-fidelity"
    " (qpu.policy)",
    "--qpu-release-at": "Release the job at a vendor queue position N, running, done or"
    " predict (qpu.release_at)",
    "--qpu-max-wait": "Longest acceptable predicted vendor wait, e.g. 30m (qpu.max_wait)",
    "--qpu-opt": "Set qpu.KEY to VALUE, VALUE read as JSON first like --setattr (multiple use OK)",
}
METAVARS = {
    "--qpu": "DEVICE",
    "--qpu-shots": "N",
    "--qpu-program": "FILE",
    "--qpu-policy": "POLICY",
    "--qpu-release-at": "WHEN",
    "--qpu-max-wait": "DURATION",
    "--qpu-opt": "KEY=VALUE",
}


def _load_request() -> ModuleType:
    """flux_quantum.protocol.request from the package this file belongs to, by path."""
    if PACKAGE not in sys.modules:
        here = Path(__file__).resolve().parents[1]
        init = here / "__init__.py"
        if not init.is_file():
            raise ImportError(f"no {PACKAGE} package at {here} (link this file, do not copy it)")
        spec = importlib.util.spec_from_file_location(
            PACKAGE, init, submodule_search_locations=[str(here)]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            del sys.modules[PACKAGE]
            raise
    return importlib.import_module(f"{PACKAGE}.protocol.request")


qpu_request: Any
try:
    qpu_request = _load_request()
except Exception as exc:
    # A broken install must not stop every user's flux submit: say it (once, though Flux
    # imports this file twice a command), offer no options.
    qpu_request = None
    if WARNED not in sys.modules:  # the one process-wide mark there is: a module entry
        sys.modules[WARNED] = ModuleType(WARNED)
        print(
            f"flux-quantum: WARNING: {__file__}: --qpu options unavailable: {exc}", file=sys.stderr
        )


def _flux_value(text: str | None) -> object:
    """A --setattr value as Flux reads it: JSON first, else the string; no '=' means 1."""
    if text is None:
        return 1
    try:
        return json.loads(text)
    except ValueError:
        return text


def _qpu_subkey(key: str) -> str | None:
    """For a --setattr KEY: "" if it sets attributes.system.qpu, "K..." if it sets
    qpu.K..., None for any other attribute (Flux's own prefix rules)."""
    if key.startswith("."):
        key = "attributes" + key
    elif not key.startswith(("attributes.", "user.", "system.")):
        key = "system." + key
    if not key.startswith("attributes."):
        key = "attributes." + key
    if key == "attributes.system.qpu":
        return ""
    if key.startswith("attributes.system.qpu."):
        return key[len("attributes.system.qpu.") :]
    return None


def _option_settings(given: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(label, table key, --setattr value text) for each qpu option given (``given``:
    the options' argparse values, ``--qpu-opt``'s a list of strings)."""
    settings: list[tuple[str, str, str]] = []
    for option, dest, key, as_json in OPTIONS:
        value = given.get(dest)
        if value is None:
            continue
        if isinstance(value, list):  # --qpu-program, repeated
            value = value[0] if len(value) == 1 else value
        text = value if as_json and isinstance(value, str) else json.dumps(value)
        settings.append((option, key, text))
    keys: tuple[str, ...] = qpu_request.TABLE_KEYS
    for item in given.get(OPT_DEST) or []:
        key, sep, text = str(item).partition("=")
        if not sep or key not in keys:
            shown = qpu_request._shown(str(item))  # the parser's spelling of a bad value
            raise ValueError(
                f"{OPT_OPTION} must be KEY=VALUE with a KEY from {', '.join(keys)}, got {shown}"
            )
        settings.append((f"{OPT_OPTION} {key}", key, text))
    return settings


def plan_setattr(entries: Sequence[str], given: Mapping[str, object]) -> list[str]:
    """The --setattr list for Flux to apply, from the user's list and the qpu options.

    ``given`` maps the options' argparse dests to their values (None when absent). The
    options become ``qpu.KEY=VALUE`` entries after the user's own. When keys are set, a
    short form ``qpu=DEVICE`` becomes ``qpu.device=DEVICE`` and a table ``qpu={...}``
    one entry per key, so that Flux nests them in any order (on its own Flux fails with
    "'str' object does not support item assignment", or lets a later table drop the
    keys set before it). Raises ValueError, one sentence, for a key set twice by
    different means, a malformed --qpu-opt, or a short form that is neither string nor
    table next to keys.
    """
    options = _option_settings(given)
    by_option: dict[str, str] = {}
    for label, key, _ in options:
        if key in by_option:
            raise ValueError(f"{by_option[key]} and {label} both set qpu.{key}; give it once")
        by_option[key] = label

    parsed = []
    for entry in entries:
        key, sep, rest = entry.partition("=")
        parsed.append((entry, key, _qpu_subkey(key.removeprefix("^")), rest if sep else None))
    mixed = bool(options) or any(sub for _, _, sub, _ in parsed)

    planned: list[str] = []
    by_setattr: dict[str, str] = {}
    for entry, key, sub, text in parsed:
        if sub is None:
            planned.append(entry)
            continue
        if sub or not mixed or key.startswith("^"):
            planned.append(entry)
            if sub:
                by_setattr.setdefault(sub.split(".")[0], f"--setattr={key}")
            continue
        value = _flux_value(text)
        if isinstance(value, str):
            planned.append(f"{key}.device={text}")
            by_setattr.setdefault("device", f"--setattr={key}")
        elif isinstance(value, dict):
            for name, item in value.items():
                planned.append(f"{key}.{name}={json.dumps(item)}")
                by_setattr.setdefault(str(name), f"--setattr={key}")
        else:
            try:
                qpu_request.parse_request(value)
            except qpu_request.RequestError as err:
                raise ValueError(str(err)) from None
    for key, label in by_option.items():
        if key in by_setattr:
            raise ValueError(f"{label} and {by_setattr[key]} both set qpu.{key}; give it once")
    planned += [f"qpu.{key}={text}" for _, key, text in options]
    return planned


def apply_options(jobspec: dict[str, Any], given: Mapping[str, object]) -> None:
    """Put the qpu options into ``attributes.system.qpu`` where preinit()'s --setattr
    entries did not: Flux's Python API (``JobspecV1.from_submit(..., qpu="sv1")``) calls
    preinit() after it applied --setattr. On the command line they are there already
    and nothing changes. Raises ValueError for a key the attributes set otherwise."""
    settings = _option_settings(given)
    if not settings:
        return
    system = jobspec.setdefault("attributes", {}).setdefault("system", {})
    current = system.get("qpu")
    wanted = {key: (label, _flux_value(text)) for label, key, text in settings}
    if isinstance(current, dict) and all(
        key in current and current[key] == value for key, (_, value) in wanted.items()
    ):
        return
    if current is None:
        table: dict[str, object] = {}
    elif isinstance(current, str):
        table = {"device": current}
    elif isinstance(current, dict):
        table = dict(current)
    else:
        try:
            qpu_request.parse_request(current)
        except qpu_request.RequestError as err:
            raise ValueError(str(err)) from None
        table = {}
    for key, (label, value) in wanted.items():
        if key in table and table[key] != value:
            raise ValueError(f"{label} and attributes qpu.{key} both set qpu.{key}; give it once")
        table[key] = value
    system["qpu"] = table


def option_message(field: str, message: str, given: Mapping[str, object]) -> str:
    """A request error as the user wrote it: ``--qpu-shots must be ...`` when the key
    came from its option, else the message unchanged (``qpu.shots must be ...``)."""
    for option, dest, key, _ in OPTIONS:
        if given.get(dest) is not None and field == f"qpu.{key}" and message.startswith(field):
            return option + message[len(field) :]
    return message


def check_jobspec(jobspec: Mapping[str, Any], given: Mapping[str, object]) -> None:
    """Refuse, before it is sent, a job whose qpu request the ingest validator would
    refuse (the same parser); ValueError with its one sentence."""
    attributes = jobspec.get("attributes")
    system = attributes.get("system") if isinstance(attributes, Mapping) else None
    if not isinstance(system, Mapping):
        return
    try:
        qpu_request.check_jobspec_attributes(system)
    except qpu_request.RequestError as err:
        raise ValueError(option_message(err.field, str(err), given)) from None


def _given(args: Any) -> dict[str, object]:
    return {dest: getattr(args, dest, None) for dest in DESTS}


class QpuOptions(CLIPlugin):
    """Ask for a QPU with flux-quantum: --qpu=DEVICE and qpu.KEY options.

    --qpu=DEVICE sets qpu.device (any, DEVICE, VENDOR:DEVICE or VENDOR:any); --qpu-shots,
    --qpu-program (repeat for a batch), --qpu-policy, --qpu-release-at and --qpu-max-wait
    set their qpu.KEY; --qpu-opt=KEY=VALUE sets any other key (VALUE read as JSON first,
    as --setattr does). They add up with --setattr=qpu.KEY=VALUE, and a short form
    --setattr=qpu=DEVICE given with keys is read as qpu.device=DEVICE; a key set twice is
    refused. The request is checked before the job is sent: a bad value stops the
    command with one sentence naming the option or key.

    Example: flux submit --qpu=braket:sv1 --qpu-shots=500 --qpu-program=qaoa.qasm -N4 ./app
    Every key and its values: flux-quantum's docs/requests.md.
    """

    def __init__(self, prog: str, prefix: str | None = None) -> None:
        super().__init__(prog, prefix=prefix)
        if qpu_request is None:
            return
        for option, dest, _, _ in OPTIONS:
            extra = {"action": "append"} if dest == "qpu_program" else {}
            self.add_option(option, metavar=METAVARS[option], help=HELP[option], **extra)
        self.add_option(
            OPT_OPTION, action="append", metavar=METAVARS[OPT_OPTION], help=HELP[OPT_OPTION]
        )

    def preinit(self, args: Any) -> None:
        if qpu_request is None or getattr(args, DONE_MARK, False):
            return
        entries = list(getattr(args, "setattr", None) or [])
        planned = plan_setattr(entries, _given(args))
        if planned != entries:
            args.setattr = planned
        setattr(args, DONE_MARK, True)

    def modify_jobspec(self, args: Any, jobspec: Any) -> None:
        if qpu_request is None:
            return
        given = _given(args)
        apply_options(jobspec.jobspec, given)
        check_jobspec(jobspec.jobspec, given)
