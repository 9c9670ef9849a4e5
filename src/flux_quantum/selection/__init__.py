"""Choosing a device and when to look again: the selection policies (``policies``), the
release rule (``release_point``: when a task is at its release point, and why), the
adaptive poller (``poller``), what kind of program a device can run (``program_kinds``),
a cheap OpenQASM reader (``qasm``), the forecast of a job's wait for nodes
(``node_wait``) and what a variational loop's step decides follows it (``step_plan``).
"""
