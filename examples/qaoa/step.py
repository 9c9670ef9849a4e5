"""One step of the QAOA MaxCut loop, run as a chain of held steps.

Submitted once (README.md)::

    flux quantum loop submit --qpu=local:local-garnet --program=examples/qaoa/start.qasm \\
        --maximize --max-iterations 29 python examples/qaoa/step.py

Step k runs after task k (the program of iteration k) is done. It reads the task's
counts, folds their expected cut into the SPSA state the previous step saved (the
initial state at k = 0, from this command's options), saves the state and writes
program k + 1, or ends the loop once SPSA has used its evaluations. The value reported
to the loop is the expected cut of task k (higher is better: submit with --maximize).

A step that runs again for the same k (its job was restarted after it saved the state)
finds its value already folded in and writes the same program k + 1 again: the state
says which evaluation comes next, so every decision is made once.

Options (read at iteration 0 only; later steps take them from the saved state):
--p, --iterations, --seed, --a, --c. Ranks other than 0 have nothing to do and exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import maxcut

from flux_quantum.errors import CommandError
from flux_quantum.job.loop import Step


def options(argv: list[str] | None) -> maxcut.SpsaConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    maxcut.add_options(parser)
    return maxcut.config_of(parser, parser.parse_args(argv))


def starting_state(step: Step, config: maxcut.SpsaConfig) -> dict[str, Any]:
    """The state before evaluation 0, checked against the loop's program 0."""
    state = maxcut.initial_state(config)
    if step.program.strip() != maxcut.circuit(state["pending"]).strip():
        raise CommandError(
            f"program 0 of loop {step.directory} is not the starting circuit of QAOA "
            f"p={config.depth}: submit the loop with the output of "
            f"'python examples/qaoa/maxcut.py start --p {config.depth}' as --program"
        )
    return state


def run(step: Step, config: maxcut.SpsaConfig) -> str:
    """Do step k's work; the line it prints."""
    k = step.iteration
    state = step.state or starting_state(step, config)
    evaluated = maxcut.decode_state(state).evaluated
    if evaluated == k + 1:  # this step ran before and saved its state: decide the same
        value = state["history"][k]
        pending = None if state["done"] else state["pending"]
        done = state["done"]
    elif evaluated == k:
        counts = step.result().counts
        value = maxcut.expected_cut(counts)
        state = maxcut.record_sample(state, counts)
        state, pending, done = maxcut.advance(state, value)
        step.save_state(state)
    else:
        raise CommandError(
            f"the saved optimiser state has {evaluated} evaluations, but this is step {k} "
            f"of loop {step.directory}: the state belongs to another loop or was edited"
        )
    line = maxcut.progress_line(k, value, state)
    if done or pending is None:
        step.done(value=value, reason=f"SPSA done: {maxcut.describe(state)}")
    else:
        step.next(maxcut.circuit(pending), value=value)
    return line


def main(argv: list[str] | None = None) -> int:
    config = options(argv)
    if os.environ.get("FLUX_TASK_RANK", "0") != "0":
        return 0  # one optimiser per loop: rank 0's
    try:
        print(run(Step.current(), config), flush=True)
    except (CommandError, ValueError) as exc:
        print(f"step.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
