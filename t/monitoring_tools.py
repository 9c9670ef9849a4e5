"""The outside tools the monitoring tests need: Debian's ``prometheus`` package
(``promtool``, the ``prometheus`` server) and ``tmux`` for ``flux quantum top``.

``missing()`` says in one line which are absent (None: all there); the tests that need
them skip with that line, and conftest prints it loudly at the end of the run.
"""

from __future__ import annotations

import shutil

TOOLS = {
    "promtool": "apt-get install prometheus",
    "prometheus": "apt-get install prometheus",
    "tmux": "apt-get install tmux",
}


def path(tool: str) -> str | None:
    return shutil.which(tool)


def missing(*tools: str) -> str | None:
    """One line naming the absent tools (all of ``TOOLS`` when none given)."""
    absent = [t for t in (tools or tuple(TOOLS)) if path(t) is None]
    if not absent:
        return None
    how = sorted({TOOLS[t] for t in absent})
    return f"monitoring tests SKIPPED: {', '.join(absent)} not found ({'; '.join(how)})"
