"""What runs inside a released job: finding and reading its task (``consumer``),
variational loops as chains of held steps (``loop``, ``loopsteps``).
"""
