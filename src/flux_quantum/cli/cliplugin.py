"""``flux quantum cli-plugin-path``: where Flux finds the ``--qpu`` options of ``flux submit``.

Flux loads CLI plugins only from ``FLUX_CLI_PLUGINPATH`` and from
``{confdir}/cli/plugins`` and ``{libexecdir}/cli/plugins`` of its own build, never from
an instance's configuration: a site links the file into its confdir, a user exports the
directory (docs/requests.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import flux_quantum


def cli_plugin_path() -> Path:
    """The CLI plugin file (``flux_quantum/cliplugin/qpu.py``), alone in its directory."""
    return Path(flux_quantum.__file__).resolve().parent / "cliplugin" / "qpu.py"


def cli_plugin_comment() -> str:
    """Comment lines for ``flux quantum config``: the instance TOML cannot load the plugin."""
    path = cli_plugin_path()
    return (
        "# flux submit --qpu=DEVICE --qpu-shots=N ... (flux-quantum's CLI plugin): Flux\n"
        "# never loads CLI plugins from an instance's configuration. A site links\n"
        f"#   ln -s {path} $(flux config builtin confdir)/cli/plugins/flux-quantum.py\n"
        "# a user of their own install exports\n"
        f"#   FLUX_CLI_PLUGINPATH={path.parent}\n"
    )


def cmd_cli_plugin_path(args: argparse.Namespace) -> int:
    path = cli_plugin_path()
    print(path.parent if args.dir else path)
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cli-plugin-path",
        help="print the path of the CLI plugin that gives flux submit its --qpu options",
        description="Print the CLI plugin file, to link into $(flux config builtin "
        "confdir)/cli/plugins for every user of a site, or with --dir its directory, for "
        "FLUX_CLI_PLUGINPATH (export FLUX_CLI_PLUGINPATH=$(flux quantum cli-plugin-path "
        "--dir)).",
    )
    p.add_argument(
        "--dir",
        action="store_true",
        help="print the directory that holds only the plugin, for FLUX_CLI_PLUGINPATH",
    )
    p.set_defaults(func=cmd_cli_plugin_path)
