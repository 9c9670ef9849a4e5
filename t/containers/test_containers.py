"""The container tier: `containers/check` builds the cluster image, starts a
3-node multi-user system instance in Docker and runs t/multiuser inside it.

Runs where Docker is installed (containers/check starts dockerd itself when
run as root); elsewhere it is skipped with one loud line naming the reason,
as the flux tier is where `flux` is missing.  Deselect it with
``-m 'not container'``: a cold run builds Flux from source (see
containers/README.md for how long that takes).

The quick tests below check, without Docker, how containers/build-base finds
the Flux release sources (cache, git mirrors) and what it says when it has
none."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CONTAINERS = Path(__file__).resolve().parents[2] / "containers"
CHECK = CONTAINERS / "check"
BUILD_BASE = CONTAINERS / "build-base"
EXIT_NO_DOCKER = 77  # containers/lib.sh
TIMEOUT = 80 * 60


def _loud_skip(request: pytest.FixtureRequest, reason: str) -> None:
    line = f"container tier SKIPPED: {reason}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line("!" * 78)
        reporter.write_line(line, red=True, bold=True)
        reporter.write_line("!" * 78)
    pytest.skip(line)


@pytest.mark.container
def test_containers_check(request: pytest.FixtureRequest) -> None:
    missing = [tool for tool in ("docker", "dockerd", "docker-compose") if not shutil.which(tool)]
    if missing:
        _loud_skip(
            request,
            f"{', '.join(missing)} not installed (apt-get install -y docker.io docker-compose debootstrap)",
        )
    proc = subprocess.run(
        [str(CHECK)], capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL
    )
    if proc.returncode == EXIT_NO_DOCKER:
        _loud_skip(request, proc.stderr.strip().splitlines()[-1].strip("! "))
    assert proc.returncode == 0, (
        f"containers/check exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-20000:]}"
        f"\n--- stderr ---\n{proc.stderr[-20000:]}"
    )


# --- containers/build-base --sources: where the Flux sources come from -----------------

RELEASES = {"flux-security": "0.15.0", "flux-core": "0.88.0", "flux-sched": "0.54.0"}
MIRROR_VARS = {
    "flux-security": "FLUX_SECURITY_MIRROR",
    "flux-core": "FLUX_CORE_MIRROR",
    "flux-sched": "FLUX_SCHED_MIRROR",
}


def _sources(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """containers/build-base --sources with an empty cache, no download and only the
    given variables (no mirror from the caller's environment)."""
    base = {k: v for k, v in os.environ.items() if k not in MIRROR_VARS.values()}
    base |= {
        "FLUXQ_SOURCE_CACHE": str(tmp_path / "cache"),
        "FLUXQ_BUILD_DIR": str(tmp_path / "build"),
        "FLUXQ_DOWNLOAD_TIMEOUT": "0",
    }
    return subprocess.run(
        [str(BUILD_BASE), "--sources"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=base | env,
    )


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _mirror(tmp_path: Path, name: str, version: str) -> Path:
    """A git repository holding tag v<version> (a stand-in for a clone of flux-framework/name)."""
    repo = tmp_path / "mirrors" / name
    repo.mkdir(parents=True)
    _git("init", "-q", cwd=repo)
    (repo / "configure.ac").write_text(f"AC_INIT([{name}])\n")
    _git("add", "configure.ac", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "r", cwd=repo)
    _git("tag", f"v{version}", cwd=repo)
    return repo


def test_build_base_without_sources_exits_77_saying_what_to_set(tmp_path: Path) -> None:
    proc = _sources(tmp_path)
    assert proc.returncode == EXIT_NO_DOCKER, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("!!!!! containers: SKIPPED:"), last
    for name, version in RELEASES.items():
        assert f"{name}-{version}" in last
    for word in (
        "FLUXQ_BASE",
        "FLUXQ_SOURCE_CACHE",
        *MIRROR_VARS.values(),
        "FLUXQ_DOWNLOAD_TIMEOUT=0",
    ):
        assert word in last
    assert not list((tmp_path / "cache").iterdir())


@pytest.mark.skipif(not shutil.which("git"), reason="git is not installed")
def test_build_base_fills_the_source_cache_from_git_mirrors(tmp_path: Path) -> None:
    mirrors = {
        MIRROR_VARS[name]: str(_mirror(tmp_path, name, version))
        for name, version in RELEASES.items()
    }
    proc = _sources(tmp_path, **mirrors)
    assert proc.returncode == 0, proc.stderr
    cache = tmp_path / "cache"
    for name, version in RELEASES.items():
        archive = cache / f"{name}-{version}-git.tar.gz"
        listing = subprocess.run(
            ["tar", "-tzf", str(archive)], capture_output=True, text=True, check=True
        ).stdout.split()
        # Laid out as the release tarball unpacks.
        assert f"{name}-{version}/configure.ac" in listing
    # Later runs take the cache and need no mirror.
    shutil.rmtree(tmp_path / "mirrors")
    again = _sources(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "archiving" not in again.stderr
    for name, version in RELEASES.items():
        assert f"{name} {version}: {cache}/{name}-{version}-git.tar.gz" in again.stderr


def test_build_base_prefers_the_release_tarball_in_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for name, version in RELEASES.items():
        tree = tmp_path / "tree" / f"{name}-{version}"
        tree.mkdir(parents=True)
        (tree / "configure").write_text("")
        subprocess.run(
            [
                "tar",
                "-czf",
                str(cache / f"{name}-{version}.tar.gz"),
                "-C",
                str(tree.parent),
                tree.name,
            ],
            check=True,
        )
        (cache / f"{name}-{version}-git.tar.gz").write_bytes(b"not used")
    proc = _sources(tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name, version in RELEASES.items():
        assert f"{name} {version}: {cache}/{name}-{version}.tar.gz" in proc.stderr


def test_build_base_names_its_image_without_docker() -> None:
    proc = subprocess.run(
        [str(BUILD_BASE), "--name"], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.startswith("flux-quantum-base:")
    assert len(proc.stdout.strip().split(":")[1]) == 16


def _path_without_flux(tmp_path: Path) -> str:
    """A PATH of the system's tools with no ``flux`` among them."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in Path(directory).iterdir() if Path(directory).is_dir() else ():
            link = bindir / tool.name
            if not tool.name.startswith("flux") and not link.exists():
                link.symlink_to(tool)
    return str(bindir)


def test_build_base_from_the_host_says_why_not_without_docker(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=_path_without_flux(tmp_path))
    proc = subprocess.run(
        [str(BUILD_BASE), "--host", "--name"], capture_output=True, text=True, timeout=60,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.strip() == "containers: the host has no flux on PATH"


@pytest.mark.skipif(shutil.which("flux") is None, reason="no flux on PATH")
def test_build_base_from_the_host_names_its_image_or_says_why_not() -> None:
    """Where the host's Flux is the base's releases on its Debian suite, the base from it
    has a name of its own, the same while the host's Flux does not change; elsewhere
    one sentence says why not."""
    runs = [
        subprocess.run(
            [str(BUILD_BASE), "--host", "--name"], capture_output=True, text=True, timeout=120
        )
        for _ in range(2)
    ]
    if runs[0].returncode == 3:
        assert runs[0].stdout == "" and len(runs[0].stderr.strip().splitlines()) == 1
        return
    assert runs[0].returncode == 0, runs[0].stderr
    name = runs[0].stdout.strip()
    assert name.startswith("flux-quantum-base:host-") and len(name.split("-")[-1]) == 16
    assert runs[1].stdout.strip() == name
    source = subprocess.run(
        [str(BUILD_BASE), "--name"], capture_output=True, text=True, timeout=60, check=True
    )
    assert source.stdout.strip() != name
