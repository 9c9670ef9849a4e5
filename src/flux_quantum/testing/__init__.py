"""What checks flux-quantum's promises over a run: the promise checker (``promises``: its
records, its pure checks and its readers of Flux, the emulator's bill and the ledger);
and ``pgserver``, the throwaway PostgreSQL server the tests and ``bench/ledger.py``
start.
"""
