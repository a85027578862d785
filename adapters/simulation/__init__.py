"""The deterministic simulator: the real aggregate and executor services against simulated
providers, crashes and time, checked by an oracle (issue 11; docs/simulation.md)."""

from adapters.simulation.faults import Fault, FaultPlan
from adapters.simulation.oracle import Oracle, Violation
from adapters.simulation.run import RunResult, SimConfig, run_seed

__all__ = ["Fault", "FaultPlan", "Oracle", "RunResult", "SimConfig", "Violation", "run_seed"]
