"""bench/benchlib.py: the commit a bench says it measured (unit tier, a real git)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from benchlib import revision  # noqa: E402


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_run_is_modified_by_its_code_and_not_by_the_results_it_writes(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results" / "run.txt").write_text("old\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git(tmp_path, "rev-parse", "--short", "HEAD")
    assert revision(tmp_path) == head
    (tmp_path / "bench" / "results" / "run.txt").write_text("new\n")
    (tmp_path / "bench" / "results" / "other.csv").write_text("a\n")
    assert revision(tmp_path) == head
    (tmp_path / "bench" / "b.py").write_text("y = 2\n")
    assert revision(tmp_path) == f"{head} (modified)"
    (tmp_path / "bench" / "b.py").unlink()
    (tmp_path / "src" / "a.py").write_text("x = 2\n")
    assert revision(tmp_path) == f"{head} (modified)"
