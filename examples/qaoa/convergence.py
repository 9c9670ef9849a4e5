"""How fast the example's SPSA converges: RUNS optimisations on Braket's LocalSimulator.

The simulator is the one the emulator runs tasks on, so this is what the drivers see on
the emulator, without the queues. Each run is the whole optimisation
(``maxcut.optimise``) with real shot noise; ``--vary-seed`` gives run i the seed
``--seed + i`` (different perturbations too), otherwise every run uses ``--seed``::

    python examples/qaoa/convergence.py --runs 40            # about 30 s
    python examples/qaoa/convergence.py --runs 40 --vary-seed

Prints, per evaluation, the mean measured expected cut and the mean, and worst, of the
best value seen so far; then the noise-free expected cut (numpy statevector) of each
run's best parameters and final theta, against the best QAOA p=1 can do.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import maxcut


def simulate(program: str, shots: int) -> dict[str, int]:
    from braket.devices import LocalSimulator
    from braket.ir.openqasm import Program

    result = LocalSimulator().run(Program(source=program), shots=shots).result()
    return dict(result.measurement_counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    maxcut.add_options(parser)
    parser.add_argument("--runs", type=int, default=20, help="optimisations (default 20)")
    parser.add_argument("--shots", type=int, default=1000, help="shots per task (default 1000)")
    parser.add_argument("--vary-seed", action="store_true", help="run i uses seed --seed + i")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.shots < 1:
        parser.error("--runs and --shots must be integers >= 1")
    config = maxcut.config_of(parser, args)
    states = []
    for i in range(args.runs):
        run_config = maxcut.SpsaConfig(**{**config.__dict__, "seed": config.seed + i})
        chosen = run_config if args.vary_seed else config
        states.append(maxcut.optimise(chosen, lambda p: simulate(p, args.shots)))
    optimum, _ = maxcut.max_cut()
    seeds = (
        f"seeds {config.seed}..{config.seed + args.runs - 1}"
        if args.vary_seed
        else f"seed {config.seed}"
    )
    print(
        f"QAOA p={config.depth} MaxCut on the {maxcut.GRAPH.name} (maximum cut {optimum}), "
        f"SPSA a={config.a} c={config.c} A={config.stability}, {args.runs} runs, {seeds}, "
        f"{args.shots} shots"
    )
    print("evaluation  mean value  mean best so far  worst best so far")
    for n in range(config.evaluations):
        values = [s["history"][n] for s in states]
        best = [max(s["history"][: n + 1]) for s in states]
        print(
            f"{n:10d}  {statistics.mean(values):10.3f}  {statistics.mean(best):16.3f}"
            f"  {min(best):17.3f}"
        )
    for label, key in (("best parameters", "best"), ("final theta", "theta")):
        exact = sorted(
            maxcut.exact_expected_cut(s[key]["parameters"] if key == "best" else s[key])
            for s in states
        )
        print(
            f"noise-free expected cut at the {label}: min {exact[0]:.3f}, "
            f"median {statistics.median(exact):.3f}, max {exact[-1]:.3f}"
        )
    if config.depth == 1:
        bound, gamma, beta = maxcut.best_p1()
        print(f"best QAOA p=1 can do: {bound:.3f} (gamma {gamma:.3f}, beta {beta:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
