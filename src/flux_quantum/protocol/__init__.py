"""The wire between the parts: the ``qpu`` request grammar (``request``), the
``qpu-*`` eventlog records (``events``) and the jobspec half of a release (``jobspec``).
Standard library only: the broker's Python (the ingest validator, the CLI plugin)
imports it.
"""
