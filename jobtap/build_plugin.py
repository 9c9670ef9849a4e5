"""Build the ``quantum`` jobtap plugin (jobtap/quantum*.c) through cffi, and the
``quantum`` job-shell plugin (jobtap/shell_quantum.c) into OUTDIR/shell/.

Used by setup.py at ``pip install`` time, and runnable by hand:
``python jobtap/build_plugin.py OUTDIR``.

The job-manager dlopen()s plugins with RTLD_NOW and the broker has no
CPython symbols, so a cffi *extension module* cannot be a jobtap plugin.
cffi's embedding mode with an empty embedding API and empty init code
produces a plain shared library that links libpython but never starts an
interpreter (nothing ever calls into Python).  flux-core is found through
pkg-config (flux-core.pc) or, failing that, through the prefix of the
``flux`` on PATH.  Never raises for a missing flux-core: returns the
reason instead, so the Python package still installs.

The job-shell plugin is loaded by flux-shell, which exports the
``flux_shell_*`` symbols itself and, like the broker, has no CPython.  It is
dlopen()ed by the shell of every job, ordinary ones included, so it is built
as a plain shared object with the C compiler Python was built with (no cffi,
no libpython): loading it costs the shell nothing but the plugin itself.
It sits alone in its own directory so that directory can go on the shell's
plugin search path (``conf.shell_pluginpath``), whose ``*.so`` are all loaded.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Both plugins include qpu_protocol.h from this directory.  The jobtap plugin is one
# file per concern (quantum.h lists them); quantum.c holds flux_plugin_init.
PLUGIN_SOURCES = [
    HERE / "quantum.c",
    HERE / "quantum_jobs.c",
    HERE / "quantum_hold.c",
    HERE / "quantum_deps.c",
    HERE / "quantum_rebuild.c",
    HERE / "quantum_history.c",
    HERE / "quantum_services.c",
    HERE / "quantum_priority.c",
]
# The jobtap plugin's pure parsers, one concern a file; jobtap/fuzz/ links them too.
PARSER_SOURCES = [HERE / "qpu_request.c", HERE / "qpu_payload.c", HERE / "qpu_config.c"]
PLUGIN_FILE = "quantum.so"
SHELL_PLUGIN_SOURCE = HERE / "shell_quantum.c"
SHELL_PLUGIN_DIR = "shell"
SHELL_PLUGIN_FILE = "shell_quantum.so"


@dataclass(frozen=True)
class FluxCoreFlags:
    """Compiler and linker flags for building against an installed flux-core."""

    include_dirs: list[str] = field(default_factory=list)
    library_dirs: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    origin: str = ""


def _pkg_config(*args: str) -> str | None:
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    env = dict(os.environ)
    flux = shutil.which("flux")
    if flux:
        # Make a flux-core in a non-default prefix visible to pkg-config.
        prefix = Path(flux).resolve().parent.parent
        extra = [str(prefix / "lib" / "pkgconfig"), str(prefix / "lib64" / "pkgconfig")]
        env["PKG_CONFIG_PATH"] = os.pathsep.join(
            [*extra, *filter(None, [env.get("PKG_CONFIG_PATH")])]
        )
    try:
        out = subprocess.run(
            [exe, *args], capture_output=True, text=True, env=env, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def find_flux_core() -> FluxCoreFlags | str:
    """Return build flags for flux-core and jansson, or why they were not found."""
    cflags = _pkg_config("--cflags", "flux-core", "jansson")
    libs = _pkg_config("--libs-only-L", "flux-core", "jansson")
    if cflags is not None and libs is not None:
        incs = [f[2:] for f in cflags.split() if f.startswith("-I")]
        libdirs = [f[2:] for f in libs.split() if f.startswith("-L")]
        return FluxCoreFlags(incs, libdirs, ["flux-core", "jansson"], "pkg-config")
    flux = shutil.which("flux")
    if flux:
        prefix = Path(flux).resolve().parent.parent
        header = prefix / "include" / "flux" / "jobtap.h"
        if header.exists():
            return FluxCoreFlags(
                [str(prefix / "include")],
                [str(prefix / "lib"), str(prefix / "lib64")],
                ["flux-core", "jansson"],
                f"flux on PATH ({flux})",
            )
        return f"found {flux} but no {header} (is the flux-core development part installed?)"
    return "flux-core not found: no pkg-config entry 'flux-core' and no 'flux' on PATH"


def build(outdir: Path) -> tuple[Path | None, str]:
    """Compile the plugin into OUTDIR. Returns (path or None, message)."""
    flags = find_flux_core()
    if isinstance(flags, str):
        return None, flags
    try:
        import cffi
    except ImportError:
        return None, "cffi is not installed"

    ffi = cffi.FFI()
    ffi.embedding_api("")
    ffi.embedding_init_code("")
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    rpaths = [d for d in [*flags.library_dirs, libdir] if d]
    ffi.set_source(
        "_flux_quantum_jobtap",
        "",
        sources=[str(path) for path in (*PLUGIN_SOURCES, *PARSER_SOURCES)],
        include_dirs=[str(HERE), *flags.include_dirs],
        library_dirs=flags.library_dirs,
        libraries=flags.libraries,
        extra_compile_args=["-Wall", "-Werror", "-Wno-unused-function", "-std=gnu11"],
        extra_link_args=[f"-Wl,-rpath,{d}" for d in rpaths],
    )
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flux-quantum-build-") as tmp:
        try:
            built = ffi.compile(tmpdir=tmp, target=PLUGIN_FILE, verbose=False)
        except Exception as exc:  # compiler errors surface as distutils exceptions
            return None, f"compiling the jobtap plugin ({HERE}/quantum*.c) failed: {exc}"
        dest = outdir / PLUGIN_FILE
        # Replace, never rewrite in place: a job-manager may have it loaded (writing
        # into a mapped plugin crashed a broker with "Illegal instruction").
        partial = outdir / f".{PLUGIN_FILE}.tmp"
        shutil.copyfile(built, partial)
        os.replace(partial, dest)
    return dest, f"built {dest} against flux-core found via {flags.origin}"


def _c_compiler() -> list[str]:
    """The C compiler command: $CC, else the one Python was built with, else cc."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def build_shell(outdir: Path) -> tuple[Path | None, str]:
    """Compile the job-shell plugin into OUTDIR/shell/. Returns (path or None, message)."""
    flags = find_flux_core()
    if isinstance(flags, str):
        return None, flags
    if flags.include_dirs and not any(
        (Path(d) / "flux" / "shell.h").exists() for d in flags.include_dirs
    ):
        return None, f"flux-core found via {flags.origin} has no flux/shell.h"
    destdir = outdir / SHELL_PLUGIN_DIR
    destdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flux-quantum-build-") as tmp:
        built = Path(tmp) / SHELL_PLUGIN_FILE
        cmd = [
            *_c_compiler(),
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-std=gnu11",
            "-Wall",
            "-Werror",
            f"-I{HERE}",  # qpu_protocol.h
            *[f"-I{d}" for d in flags.include_dirs],
            str(SHELL_PLUGIN_SOURCE),
            "-o",
            str(built),
            *[f"-L{d}" for d in flags.library_dirs],
            *[f"-Wl,-rpath,{d}" for d in flags.library_dirs],
            *[f"-l{lib}" for lib in flags.libraries],
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"compiling {SHELL_PLUGIN_SOURCE} failed: {exc}"
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            return None, f"compiling {SHELL_PLUGIN_SOURCE} failed: {detail}"
        dest = destdir / SHELL_PLUGIN_FILE
        # Replace, never rewrite in place: running shells may have it mapped.
        partial = destdir / f".{SHELL_PLUGIN_FILE}.tmp"
        shutil.copyfile(built, partial)
        os.replace(partial, dest)
    return dest, f"built {dest} against flux-core found via {flags.origin}"


def main(argv: list[str]) -> int:
    outdir = Path(argv[1]) if len(argv) > 1 else Path.cwd()
    rc = 0
    for builder in (build, build_shell):
        path, message = builder(outdir)
        print(message, file=sys.stderr)
        rc = rc if path else 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
