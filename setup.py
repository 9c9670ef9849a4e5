"""Build hook: compile the quantum jobtap plugin (through cffi) and the quantum
job-shell plugin into the package.

All metadata lives in pyproject.toml.  Where flux-core is absent the install
still succeeds; the reason is written to flux_quantum/jobtap/BUILD-STATUS
(`flux quantum plugin-path` reports it) and, for the shell plugin, to
flux_quantum/jobtap/shell/BUILD-STATUS (`flux quantum config` reports it).
"""

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

sys.path.insert(0, str(Path(__file__).resolve().parent / "jobtap"))
import build_plugin  # noqa: E402


class BuildWithPlugin(build_py):
    def run(self) -> None:
        # A build directory left by an earlier install keeps modules that have since
        # moved or gone; build_py would copy them into the wheel beside the new ones.
        shutil.rmtree(Path(self.build_lib) / "flux_quantum", ignore_errors=True)
        super().run()
        outdir = Path(self.build_lib) / "flux_quantum" / "jobtap"
        outdir.mkdir(parents=True, exist_ok=True)
        (outdir / "__init__.py").write_text('"""Home of the built quantum jobtap plugin."""\n')
        path, message = build_plugin.build(outdir)
        status = f"{'ok' if path else 'not built'}: {message}\n"
        (outdir / "BUILD-STATUS").write_text(status)
        banner = "flux-quantum: jobtap plugin " + status.strip()
        print(banner, file=sys.stderr)
        shell_dir = outdir / build_plugin.SHELL_PLUGIN_DIR
        shell_dir.mkdir(parents=True, exist_ok=True)
        path, message = build_plugin.build_shell(outdir)
        status = f"{'ok' if path else 'not built'}: {message}\n"
        (shell_dir / "BUILD-STATUS").write_text(status)
        print("flux-quantum: job-shell plugin " + status.strip(), file=sys.stderr)


class BinaryDistribution(Distribution):
    """The wheel carries a compiled shared object: tag it for this platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithPlugin}, distclass=BinaryDistribution)
