"""The jobtap plugin's C parsers (jobtap/qpu_request.c, qpu_payload.c, qpu_config.c),
built by jobtap/fuzz/build_fuzz.py and called through ctypes: one call, the parser's
target name and the input as JSON text, back whether it accepted and, if not, its
one-sentence reason. It owns the loaded library; it never builds anything itself."""

from __future__ import annotations

import ctypes
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "jobtap" / "fuzz"))
import build_fuzz  # noqa: E402

ACCEPTED, REFUSED, NOT_JSON = 0, 1, 2


@dataclass(frozen=True)
class Verdict:
    """What a C parser said of one input: accepted, or refused with a reason."""

    accepted: bool
    reason: str


class CParsers:
    """The C parsers in ``libqpu_parsers.so``."""

    def __init__(self, helper: Path) -> None:
        self.lib = ctypes.CDLL(str(helper))
        self.lib.qpu_parse_text.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        self.lib.qpu_parse_text.restype = ctypes.c_int

    def parse(self, target: str, value: object) -> Verdict | None:
        """Run TARGET on VALUE (sent as JSON text); None where jansson refuses the text
        (a number out of int64 range, NaN), which no jobspec or payload can carry."""
        text = json.dumps(value, allow_nan=False)
        return self.parse_text(target, text)

    def parse_text(self, target: str, text: str) -> Verdict | None:
        errbuf = ctypes.create_string_buffer(256)
        rc = self.lib.qpu_parse_text(target.encode(), text.encode(), errbuf, len(errbuf))
        if rc == NOT_JSON:
            return None
        if rc not in (ACCEPTED, REFUSED):
            raise ValueError(f"unknown C parser target {target!r}")
        return Verdict(rc == ACCEPTED, errbuf.value.decode(errors="replace"))


def build(outdir: Path) -> tuple[build_fuzz.FuzzBuild, CParsers | None]:
    """Build the fuzzer and helper into OUTDIR; the helper loaded, or None."""
    built = build_fuzz.build(outdir)
    return built, CParsers(built.helper) if built.helper else None


def fuzz_build_dir(tmp_path_factory) -> Path:
    """Where a test session builds the fuzzer and helper (FLUXQ_FUZZ_BUILD to reuse one)."""
    import os

    given = os.environ.get("FLUXQ_FUZZ_BUILD")
    return Path(given) if given else tmp_path_factory.mktemp("fuzz-build")
