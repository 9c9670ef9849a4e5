"""flux-quantum: quantum-classical co-scheduling for the Flux Framework.

Jobs that ask for a QPU (``flux submit --setattr=qpu=...``) are held in DEPEND by
the ``quantum`` jobtap plugin until their vendor task is about to run.
"""

__version__ = "0.1.0"
