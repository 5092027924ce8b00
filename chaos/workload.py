"""The chaos run's TFJobs: replicas of shell commands whose outcome is known in advance.

Each job has two workers; worker 0 leads (its exit decides the job, as in a job without a
chief) and worker 1 sleeps until the job's clean-up deletes it. Worker 0 either succeeds,
fails once with a retryable exit code and then succeeds (one restart), or fails with a
permanent code. So whatever the faults, each job must end in one known state, with one
restart for its retryable failure and one for each generation of its pods a lost node took
(their pods tolerate a lost node for EVICT_AFTER_SECONDS only, then they are evicted). Jobs
are submitted over the first part of the run, so that some are created, some restarted and
some finished while faults hit.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from tfjob_localcluster.images.catalog import BUSYBOX
from tfjob_operator.api import CONTAINER_NAME, KIND, LABEL_GENERATION, TFJOB_DEV

#: Killed by SIGINT (128 + 2): retryable under restartPolicy ExitCode. Not 137, which a
#: pod killed with its node also exits with.
RETRYABLE_EXIT: Final = 130
#: A code below 128: the program's own error, never retried under ExitCode.
PERMANENT_EXIT: Final = 1
#: How long worker 0 runs (before failing, and again after its restart), in seconds.
RUN_SECONDS: Final = (10, 40)
#: How long the pods stay on a node that stopped answering before they are evicted
#: (Kubernetes' default is 300 s): what a user who wants a lost node's work restarted
#: soon puts in the pod template.
EVICT_AFTER_SECONDS: Final = 5
#: The taints the node lifecycle controller puts on a node that stopped answering.
NODE_LOST_TAINTS: Final = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


class Outcome(StrEnum):
    SUCCEEDS = "succeeds"
    RETRIES = "fails once, retried"
    FAILS = "fails"


#: One in five jobs retries once and one in five fails, in this order by index.
OUTCOMES: Final = (
    Outcome.SUCCEEDS,
    Outcome.RETRIES,
    Outcome.SUCCEEDS,
    Outcome.FAILS,
    Outcome.SUCCEEDS,
)


@dataclass(frozen=True)
class ChaosJob:
    name: str
    outcome: Outcome
    #: Seconds after the run's start when the harness creates it.
    submit_at: float
    run_seconds: int

    @property
    def expected_state(self) -> str:
        return "Failed" if self.outcome is Outcome.FAILS else "Succeeded"

    def expected_restarts(self, lost: Collection[int] = ()) -> int:
        """One restart for each generation the cluster took (`lost`: a lost node evicted
        its pods, or a pod could not start), and one for the retryable failure, which only
        generation 0 has: if the cluster took generation 0, generation 1 runs as the
        retry, and succeeds."""
        retries = self.outcome is Outcome.RETRIES and 0 not in lost
        return len(set(lost)) + int(retries)

    def leader_script(self) -> str:
        run = f"sleep {self.run_seconds}"
        if self.outcome is Outcome.SUCCEEDS:
            return run
        if self.outcome is Outcome.FAILS:
            return f"{run}; exit {PERMANENT_EXIT}"
        return f'if [ "$GENERATION" = 0 ]; then {run}; exit {RETRYABLE_EXIT}; fi; {run}'

    def manifest(self, namespace: str) -> dict[str, Any]:
        # Each worker picks its script by hostname (the pod's name): one replica spec.
        script = (
            f'if [ "$HOSTNAME" = {self.name}-worker-0 ]; then {self.leader_script()}; '
            "else exec sleep 3600; fi"
        )
        generation = {
            "name": "GENERATION",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LABEL_GENERATION}']"}},
        }
        container = {
            "name": CONTAINER_NAME,
            "image": BUSYBOX,
            "command": ["sh", "-c", script],
            "env": [generation],
        }
        return {
            "apiVersion": TFJOB_DEV.api_version,
            "kind": KIND,
            "metadata": {"name": self.name, "namespace": namespace},
            "spec": {
                "tfReplicaSpecs": {
                    "Worker": {
                        "replicas": 2,
                        "restartPolicy": "ExitCode",
                        "template": {
                            "spec": {
                                "terminationGracePeriodSeconds": 1,
                                "containers": [container],
                                "tolerations": [
                                    {
                                        "key": key,
                                        "operator": "Exists",
                                        "effect": "NoExecute",
                                        "tolerationSeconds": EVICT_AFTER_SECONDS,
                                    }
                                    for key in NODE_LOST_TAINTS
                                ],
                            }
                        },
                    }
                }
            },
        }


def plan_jobs(count: int, submit_within: float, seed: int) -> list[ChaosJob]:
    """`count` jobs, submitted at random moments within `submit_within` seconds."""
    rng = random.Random(seed)
    moments = sorted(rng.uniform(0, submit_within) for _ in range(count))
    return [
        ChaosJob(
            name=f"chaos-{index:03d}",
            outcome=OUTCOMES[index % len(OUTCOMES)],
            submit_at=round(moment, 1),
            run_seconds=rng.randint(*RUN_SECONDS),
        )
        for index, moment in enumerate(moments)
    ]
