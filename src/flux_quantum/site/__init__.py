"""The site's policy: who may use which device (``access``), who pays (``accounts``),
spend limits (``quota``), what a task is charged as (``charge``), the ledger and its
stores (``ledger``, ``ledger_store``) and its usage report (``usage_report``), merged
tasks' limits and decisions (``merging``) and what each of their jobs pays
(``cost_shares``), reserved QPU time (``reservations``), flux-accounting beside it
(``accounting``: its banks, and QPU spend fed into its fair-share), and the
``SitePolicy`` that puts them together (``policy``).

This face imports nothing: the ingest validator imports ``flux_quantum.site.access`` in
the broker's own Python, standard library only (t/site/test_access.py checks it).
"""
