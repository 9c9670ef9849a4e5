"""``python -m flux_quantum.cutting``: prepare a cut, JSON on stdin and stdout
(``flux_quantum.cutting.prepare``; ``run_bounded`` runs it as its bounded child)."""

import sys

from flux_quantum.cutting.prepare import main

sys.exit(main())
