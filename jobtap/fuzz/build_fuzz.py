"""Build the jobtap plugin's parser fuzzer and its ctypes helper.

``python jobtap/fuzz/build_fuzz.py OUTDIR`` compiles, from the plugin's own parser
sources (jobtap/qpu_request.c, qpu_payload.c, qpu_config.c, the very files quantum.so
is built from) and this folder's qpu_parsers.c:

- ``fuzz_qpu``: a libFuzzer binary under ASan and UBSan (clang), or, where clang's
  libFuzzer is missing, a replay-only binary under gcc's ASan and UBSan that runs the
  corpus and regression files once each;
- ``libqpu_parsers.so``: the same parsers without sanitizers, for the Python tests to
  call through ctypes (the differential test against ``flux_quantum.protocol.request``).

It owns nothing but compiler command lines; it never runs the fuzzer (t/jobtap/test_fuzz_plugin.py
and bench/fuzz.py do) and never raises for a missing compiler or flux-core: it returns
the reason instead.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBTAP = HERE.parent
sys.path.insert(0, str(JOBTAP))
import build_plugin  # noqa: E402

CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
DICTIONARY = HERE / "qpu.dict"
FUZZER = "fuzz_qpu"
HELPER = "libqpu_parsers.so"
SANITIZERS = "address,undefined"


@dataclass(frozen=True)
class FuzzBuild:
    """What was built: the fuzzer (and whether it is libFuzzer) and the ctypes helper."""

    fuzzer: Path | None
    libfuzzer: bool
    helper: Path | None
    messages: tuple[str, ...]


def _flags() -> list[str] | str:
    flags = build_plugin.find_flux_core()
    if isinstance(flags, str):
        return flags
    return [
        f"-I{JOBTAP}",
        f"-I{HERE}",
        *[f"-I{d}" for d in flags.include_dirs],
        *[f"-L{d}" for d in flags.library_dirs],
        *[f"-Wl,-rpath,{d}" for d in flags.library_dirs],
    ]


def _sources() -> list[str]:
    return [str(p) for p in (*build_plugin.PARSER_SOURCES, HERE / "qpu_parsers.c")]


def _compile(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if proc.returncode != 0:
        return (proc.stderr or proc.stdout).strip()[-2000:]
    return None


def build_fuzzer(outdir: Path) -> tuple[Path | None, bool, str]:
    """(path, is_libfuzzer, message): libFuzzer with clang, else a gcc replay binary."""
    flags = _flags()
    if isinstance(flags, str):
        return None, False, flags
    dest = outdir / FUZZER
    common = ["-g", "-O1", "-std=gnu11", "-Wall", "-Werror", "-fno-omit-frame-pointer"]
    sanitize = [f"-fsanitize={SANITIZERS}", "-fno-sanitize-recover=all"]
    libs = ["-lflux-core", "-ljansson"]
    clang = shutil.which("clang")
    if clang:
        why = _compile(
            [
                clang,
                *common,
                f"-fsanitize=fuzzer,{SANITIZERS}",
                "-fno-sanitize-recover=all",
                *flags,
                str(HERE / "fuzz_qpu.c"),
                *_sources(),
                "-o",
                str(dest),
                *libs,
            ]
        )
        if why is None:
            return dest, True, f"built {dest} (clang libFuzzer, ASan+UBSan)"
        clang_why = f"clang libFuzzer build failed: {why}"
    else:
        clang_why = "clang not found"
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        return None, False, f"{clang_why}; no gcc either"
    why = _compile(
        [
            gcc,
            *common,
            *sanitize,
            *flags,
            str(HERE / "fuzz_qpu.c"),
            str(HERE / "replay_main.c"),
            *_sources(),
            "-o",
            str(dest),
            *libs,
        ]
    )
    if why is not None:
        return None, False, f"{clang_why}; gcc sanitizer build failed: {why}"
    return dest, False, f"built {dest} (replay only, gcc ASan+UBSan: {clang_why})"


def build_helper(outdir: Path) -> tuple[Path | None, str]:
    """The parsers as a plain shared library for ctypes."""
    flags = _flags()
    if isinstance(flags, str):
        return None, flags
    cc = build_plugin._c_compiler()
    dest = outdir / HELPER
    why = _compile(
        [
            *cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-std=gnu11",
            "-Wall",
            "-Werror",
            *flags,
            *_sources(),
            "-o",
            str(dest),
            "-lflux-core",
            "-ljansson",
        ]
    )
    if why is not None:
        return None, f"building {dest} failed: {why}"
    return dest, f"built {dest}"


def build(outdir: Path) -> FuzzBuild:
    outdir.mkdir(parents=True, exist_ok=True)
    fuzzer, libfuzzer, fuzz_message = build_fuzzer(outdir)
    helper, helper_message = build_helper(outdir)
    return FuzzBuild(fuzzer, libfuzzer, helper, (fuzz_message, helper_message))


def main(argv: list[str]) -> int:
    outdir = Path(argv[1]) if len(argv) > 1 else Path.cwd() / "fuzz-build"
    built = build(outdir)
    for message in built.messages:
        print(message, file=sys.stderr)
    return 0 if built.fuzzer and built.helper else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
