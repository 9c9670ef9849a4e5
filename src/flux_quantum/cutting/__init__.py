"""Circuit cutting: a circuit wider than the devices runs as fragments, recombined.

``prepare`` (in a bounded child process: ``run_bounded``) parses the circuit
(``circuit``), chooses the cut (``plan``), and builds each fragment's subexperiments and
the terms that combine them (``experiments``) into a manifest (``manifest``); ``cost``
bounds what its tasks may cost before any exists; ``reconstruct`` turns the programs'
counts into expectation values with their standard errors; ``exact`` computes exact
values by state-vector simulation, for checks. The front end is ``flux quantum cut``
(``flux_quantum.cli.cut``); the job-side helper ``flux_quantum.job.cut``.
"""

from flux_quantum.cutting.circuit import Circuit, CircuitError, Gate, parse_circuit
from flux_quantum.cutting.cost import CostBound, cost_bound
from flux_quantum.cutting.experiments import Experiments, Program, Term, build_experiments
from flux_quantum.cutting.manifest import ManifestError, read_manifest, write_manifest
from flux_quantum.cutting.observables import ObservableError, parse_observables
from flux_quantum.cutting.plan import Plan, PlanError, plan_cut
from flux_quantum.cutting.prepare import PrepareError, prepare, run_bounded
from flux_quantum.cutting.reconstruct import Estimate, ReconstructionError, reconstruct

__all__ = [
    "Circuit",
    "CircuitError",
    "CostBound",
    "Estimate",
    "Experiments",
    "Gate",
    "ManifestError",
    "ObservableError",
    "Plan",
    "PlanError",
    "PrepareError",
    "Program",
    "ReconstructionError",
    "Term",
    "build_experiments",
    "cost_bound",
    "parse_circuit",
    "parse_observables",
    "plan_cut",
    "prepare",
    "read_manifest",
    "reconstruct",
    "run_bounded",
    "write_manifest",
]
