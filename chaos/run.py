"""One chaos run: a local cluster (with a bystander node, chaos.bystander), the operator,
the jobs, the faults, the verdict.

The main thread starts every process (their parent-death signal is bound to it: a
process started from a worker thread would die with that thread) and injects the faults;
the journal's watches and the jobs' submissions run in the watcher's thread. Once the
faults are over, the run waits until every job shows a terminal state (or `settle_seconds`
have passed), then deletes the jobs and lists what is left of their pods and services.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from chaos import rbac
from chaos.bystander import Bystander
from chaos.faults import NODE_GRACE_SECONDS, Fault, planned_seconds, schedule
from chaos.injector import Injector
from chaos.journal import Journal, Watcher
from chaos.operators import GROUP, LEASE_NAMESPACE, Candidates
from chaos.proxies import Toxiproxy
from chaos.verdict import TERMINAL, Verdict, judge
from chaos.workload import plan_jobs
from harness import audit
from tfjob_localcluster.host import packages
from tfjob_localcluster.images.catalog import BUSYBOX
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_localcluster.waiting import wait_until
from tfjob_operator.api import PLURAL, TFJOB_DEV
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "charts" / "tfjob-operator" / "crds" / "tfjobs.tfjob.dev.yaml"
NAMESPACE = "chaos"
CLEANUP_SECONDS = 120


class ChaosError(RuntimeError):
    pass


@dataclass(frozen=True)
class Settings:
    jobs: int = 60
    faults_per_kind: int = 3
    seed: int = 1
    #: Jobs are submitted at random moments within this many seconds of the start; None:
    #: within the fault schedule's planned length, so that faults to the last meet jobs.
    submit_within: float | None = None
    #: Quiet seconds before each fault, drawn from this range.
    gap: tuple[float, float] = (5.0, 20.0)
    #: How long, after the last fault, every job has to show a terminal state.
    settle_seconds: float = 240.0


def run(settings: Settings, state_dir: Path, say: Callable[[str], None]) -> Verdict:
    packages.ensure(["faketime"], say=say)  # the clock-skew fault (chaos.clocks)
    grace = [f"--node-monitor-grace-period={NODE_GRACE_SECONDS}s"]
    # The operators' requests, in the API server's own record: takeovers are read there.
    state_dir.mkdir(parents=True, exist_ok=True)
    policy = state_dir / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(audit.policy(groups=[GROUP])))
    cluster = LocalCluster(
        state_dir / "cluster",
        say=say,
        control_plane_args={
            "kube-controller-manager": grace,
            "kube-apiserver": audit.apiserver_args(policy, state_dir / "audit.log"),
        },
    )
    with cluster, Bystander(cluster, state_dir), Toxiproxy(state_dir) as toxiproxy:
        cluster.load_images([BUSYBOX])
        assert cluster.control_plane is not None
        rest = cluster.control_plane.rest()
        _install(cluster, rest)
        operators = Candidates(cluster, rest, state_dir, say, toxiproxy)
        try:
            operators.start()
            return _run(settings, cluster, rest, operators, state_dir / "audit.log", say)
        finally:
            operators.stop()


def _install(cluster: LocalCluster, rest: Rest) -> None:
    done = subprocess.run(
        cluster.kubectl_command("apply", "--server-side", "--force-conflicts", "-f", str(CRD)),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ChaosError(f"kubectl apply -f {CRD}: {done.stderr.strip()}")
    for namespace in (NAMESPACE, LEASE_NAMESPACE):
        rest.create_or_replace(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    rbac.grant(rest, GROUP)
    paths = (
        f"{TFJOB_DEV.path}/namespaces/{NAMESPACE}/{PLURAL}",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default",
    )
    wait_until(
        lambda: all(rest.ok(path) for path in paths),
        60,
        lambda: ChaosError(f"not served 60 s after install: {' or '.join(paths)}"),
        interval=0.2,
    )


def _run(
    settings: Settings,
    cluster: LocalCluster,
    rest: Rest,
    operators: Candidates,
    audit_log: Path,
    say: Callable[[str], None],
) -> Verdict:
    assert cluster.control_plane is not None
    clock, started_at = time.monotonic(), time.time()
    planned = schedule(settings.faults_per_kind, settings.gap, settings.seed)
    within = settings.submit_within
    jobs = plan_jobs(
        settings.jobs, planned_seconds(planned) if within is None else within, settings.seed
    )
    journal = Journal()
    watcher = Watcher(cluster.kubeconfig, NAMESPACE, journal, clock)
    watcher.start([(job.submit_at, job.manifest(NAMESPACE)) for job in jobs])
    injector = Injector(operators, cluster)
    faults: list[Fault] = []

    def check() -> None:
        watcher.check()
        operators.supervise()

    try:
        for fault in planned:
            _wait(fault.gap, check)
            say(f"{fault.kind} ({fault.down:.1f} s down)")
            faults.append(injector.inject(fault, clock))
        # The last fault may have taken the leader away: a standby takes over first.
        operators.wait_leader()
        say(f"faults done; waiting up to {settings.settle_seconds:.0f} s for every job to end")
        deadline = time.monotonic() + settings.settle_seconds
        while not _all_ended(journal, [job.name for job in jobs]):
            check()
            if time.monotonic() > deadline:
                break
            time.sleep(1)
        leftovers = _delete_all(rest)
    finally:
        watcher.stop()
    operators.stop()
    records = journal.snapshot()
    verdict = judge(
        jobs,
        records,
        faults,
        leftovers,
        operators.figures(),
        audit.read(audit_log),
        {
            resource: {"outages": journal.outages[resource], "relists": journal.relists[resource]}
            for resource in ("tfjobs", "pods", "services")
        },
        time.monotonic() - clock,
        started_at,
    )
    if not verdict.ok:
        # What the harness saw, beside the cluster's logs and the audit log it keeps.
        lines = (json.dumps(asdict(record)) for record in records)
        (audit_log.parent / "journal.jsonl").write_text("\n".join(lines) + "\n")
    return verdict


def _wait(seconds: float, check: Callable[[], None]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _all_ended(journal: Journal, names: list[str]) -> bool:
    states = journal.job_states()
    return all(states.get(name) in TERMINAL for name in names)


def _delete_all(rest: Rest) -> dict[str, list[str]]:
    """Deletes every TFJob of the run; returns the pods and services still there after
    CLEANUP_SECONDS."""
    rest.request(
        "DELETE",
        f"{TFJOB_DEV.path}/namespaces/{NAMESPACE}/{PLURAL}?propagationPolicy=Background",
    )
    deadline = time.monotonic() + CLEANUP_SECONDS
    while True:
        try:
            left = {
                kind: [
                    item["metadata"]["name"]
                    for item in rest.request("GET", f"/api/v1/namespaces/{NAMESPACE}/{kind}")[
                        "items"
                    ]
                ]
                for kind in ("pods", "services")
            }
        except (ApiError, OSError) as error:
            if time.monotonic() > deadline:
                raise ChaosError(f"could not list what the jobs left: {error}") from error
        else:
            if not any(left.values()) or time.monotonic() > deadline:
                return left
        time.sleep(1)
