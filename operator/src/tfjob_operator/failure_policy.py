"""What a failed replica means for the job: retry or fail, what restarts with it, and when
restarts must stop (backoffLimit)."""

from __future__ import annotations

from .api import PREEMPTION_EXIT_CODE, ReplicaType, RestartPolicy
from .observe import Failure
from .spec import JobSpec, Replica

#: Exit codes from here up mean the process was killed by a signal (128 + the signal).
SIGNAL_EXIT_CODES = 128


def is_retryable(policy: RestartPolicy, failure: Failure) -> bool:
    """A disruption is always retryable; an exit code only under ExitCode.

    Under ExitCode, PREEMPTION_EXIT_CODE (TensorFlow's preemption checkpoint handler, and
    tfjob-train's code for a lost peer) and codes >= 128 (killed by a signal) are
    retryable; 1-127 are the user's code failing and would fail again.
    """
    if failure.disrupted:
        return True
    if policy is not RestartPolicy.EXIT_CODE or failure.exit_code is None:
        return False
    return failure.exit_code == PREEMPTION_EXIT_CODE or failure.exit_code >= SIGNAL_EXIT_CODES


def restart_group(spec: JobSpec, failed: Replica) -> set[Replica]:
    """Which replicas must restart together when `failed` failed retryably.

    Without ps (MultiWorkerMirroredStrategy) a collective group cannot take back a single
    replacement: chief and workers restart together. With ps, the coordinator takes a
    worker back, but a lost ps or chief loses the training state: all of them restart.
    The evaluator only reads checkpoints and restarts alone.
    """
    if failed.type is ReplicaType.EVALUATOR:
        return {failed}
    if spec.has_ps and failed.type is ReplicaType.WORKER:
        return {failed}
    return {r for r in spec.replicas() if r.type is not ReplicaType.EVALUATOR}


def past_backoff_limit(limit: int | None, job_restarts: int, in_place_restarts: int) -> bool:
    """Restarts of the whole job and of containers in place count together, as Kubeflow's
    backoffLimit does; no limit means restarts never stop."""
    return limit is not None and job_restarts + in_place_restarts > limit
