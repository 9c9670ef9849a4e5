"""What runs inside a released job: finding and reading its task (``consumer``), and
variational loops as chains of held steps: the loop's directory and journal (``loop``),
its steps in Flux (``loopsteps``), a step job's command (``steprun``), what a step reads
to decide what follows it (``forecast``) and a step keeping its nodes (``hold``).
"""
