"""The multi-user suite (run inside the container cluster by containers/check).

It needs the cluster: real users, munge, a setuid IMP and three brokers.  On
any other machine it is invisible: nothing here is collected unless
FLUXQ_IN_CLUSTER=1 (containers/check sets it), so the host's plain
``python -m pytest`` never sees it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

IN_CLUSTER = os.environ.get("FLUXQ_IN_CLUSTER") == "1"

if not IN_CLUSTER:
    collect_ignore_glob = ["*"]
else:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
