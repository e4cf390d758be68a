"""Faults x workloads: the workloads (``workloads``), and the runner that plays a matrix of them
on a ``chaos.bed.Bed`` while injecting faults (``runner``). Each workload's promises are the
audit's (``chaos.audit``)."""

from chaos.scenarios.runner import MatrixRun, Schedule, run_matrix
from chaos.scenarios.workloads import WORKLOADS, WorkloadContext

__all__ = ["WORKLOADS", "MatrixRun", "Schedule", "WorkloadContext", "run_matrix"]
