"""Entry point of ``flux quantum``: parse, dispatch to a subcommand module, format errors.

Each subcommand lives in its own module under ``flux_quantum.cli`` and exposes
``add_parsers(subparsers)``; this file only wires them together and turns
``CommandError`` into Flux-style ``flux-quantum: ERROR: ...`` lines.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from flux_quantum import __version__
from flux_quantum.errors import CommandError

# Modules that contribute subcommands, in help order.
SUBCOMMAND_MODULES = (
    "flux_quantum.cli.plugin",
    "flux_quantum.cli.cliplugin",
    "flux_quantum.cli.backends",
    "flux_quantum.cli.emulator",
    "flux_quantum.cli.graph",
    "flux_quantum.cli.task",
    "flux_quantum.cli.usage",
    "flux_quantum.cli.accounting",
    "flux_quantum.cli.reservations",
    "flux_quantum.cli.loop",
    "flux_quantum.cli.cut",
    "flux_quantum.cli.service",
    "flux_quantum.cli.top",
    "flux_quantum.cli.metrics",
    "flux_quantum.cli.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flux quantum",
        description="Quantum-classical co-scheduling for Flux.",
    )
    parser.add_argument("--version", action="version", version=f"flux-quantum {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except CommandError as exc:
        print(f"flux-quantum: ERROR: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
