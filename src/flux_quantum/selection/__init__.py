"""Choosing a device and when to look again: the selection policies
(``policies``), the adaptive poller and release rule inputs (``poller``), what kind
of program a device can run (``program_kinds``) and a cheap OpenQASM reader (``qasm``).
"""
