"""``python -m flux_quantum.service``: the handler service process (see ``runner``)."""

import sys

from flux_quantum.service.runner import main

sys.exit(main())
