#!/usr/bin/env python3
"""The Grafana dashboard's panels drawn from a Prometheus run: docs/monitoring.png.

``t/metrics/test_metrics_flux.py`` run with ``FLUX_QUANTUM_PANELS=FILE`` writes every query of the
shipped dashboard (``flux quantum metrics dashboard``) as Prometheus' range-query results
over the test (jobs held, released and failed, the vendor stopped and started again);
this script draws them with matplotlib, one panel per dashboard panel, time in seconds
from the start of the run:

    FLUX_QUANTUM_PANELS=/tmp/panels.json python -m pytest t/metrics/test_metrics_flux.py
    python bench/monitoring_panels.py /tmp/panels.json docs/monitoring.png
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def gaps_broken(points: list[tuple[float, float]], step: float) -> tuple[list[float], list[float]]:
    """The points, with a break (NaN) where Prometheus had no sample: a series that
    stopped (no job in that state) is not drawn across the time it was absent."""
    xs: list[float] = []
    ys: list[float] = []
    for x, y in points:
        if xs and x - xs[-1] > 1.5 * step:
            xs.append(xs[-1] + step)
            ys.append(math.nan)
        xs.append(x)
        ys.append(y)
    return xs, ys


def draw(data: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = data["panels"]
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 2.6 * rows), squeeze=False)
    start = data["start"]
    for ax, panel in zip(axes.flat, panels, strict=False):
        drawn = 0
        for target in panel["targets"]:
            for series in target["result"]:
                points = [(float(t) - start, float(v)) for t, v in series["values"]]
                if not points:
                    continue
                xs, ys = gaps_broken(points, data.get("step", 1.0))
                ax.plot(
                    xs,
                    ys,
                    marker=".",
                    markersize=3,
                    label=legend(target["legend"], series["metric"])[:28],
                )
                drawn += 1
        ax.set_title(panel["title"], fontsize=9)
        ax.tick_params(labelsize=7)
        unit = panel["unit"]
        if unit == "s":
            ax.set_ylabel("seconds", fontsize=7)
        if drawn:
            ax.legend(fontsize=6, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the run started", fontsize=7)
    fig.suptitle(
        "flux-quantum dashboard panels over t/metrics/test_metrics_flux.py (Prometheus range queries)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("panels", type=Path, help="the JSON FLUX_QUANTUM_PANELS wrote")
    parser.add_argument("png", type=Path, help="where to draw them")
    args = parser.parse_args()
    draw(json.loads(args.panels.read_text()), args.png)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
