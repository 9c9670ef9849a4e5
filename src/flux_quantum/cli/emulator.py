"""Placeholder: subcommands of this module arrive with their issue."""

from __future__ import annotations

import argparse


def add_parsers(sub: argparse._SubParsersAction) -> None:  # noqa: ARG001
    return None
