"""The site's policy: who may use which device (``access``), who pays (``accounts``),
spend limits (``quota``), the ledger and its stores (``ledger``, ``ledger_store``),
merged tasks' limits (``merging``), reserved QPU time (``reservations``), and the
``SitePolicy`` that puts them together (``policy``).
"""
