"""Choosing a device and when to look again: the selection policies (``policies``), the
release rule (``release_point``: when a task is at its release point, and why), the
adaptive poller (``poller``), what kind of program a device can run (``program_kinds``)
and a cheap OpenQASM reader (``qasm``).
"""
