"""`make demo`: the whole system at work, from an empty machine to two trained models.

Starts the local cluster (the control plane built from source, a kubelet with
containerd), imports the operator and trainer images built by `make images` into its
node, installs the TFJob CRD and the operator with the Helm chart (the operator runs as
a pod from its image), submits examples/digits-mwms.yaml and examples/digits-pss.yaml,
shows their progress as it happens, prints each job's result, and stops the cluster.

When nothing progresses for 45 s (no job state, pod phase or training line changed), or
the operator's pod cannot start, it prints a diagnosis (each pod's phase, why it waits,
its last events and log lines; the trainers' logs name the peers they wait for) and
exits 1.

    hack/demo.py                  # local cluster, stopped at the end
    hack/demo.py --keep           # leave it running (`make cluster-down` stops it)
    hack/demo.py --kubeconfig K   # use an existing cluster (the images must be available)
    hack/demo.py --kind           # a kind cluster built from this checkout (needs Docker)

Exits 1 if a job did not succeed.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster import diagnose
from tfjob_localcluster.addons import chart
from tfjob_localcluster.addons.chart import install_operator
from tfjob_localcluster.binaries import cache_root
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.images.catalog import PROJECT_IMAGES
from tfjob_localcluster.kind.cluster import KindCluster, unavailable
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest
from tfjob_operator.client import TFJobClient
from tfjob_operator.client.results import results_in

ROOT = Path(__file__).resolve().parent.parent

EXAMPLES = ("digits-mwms.yaml", "digits-pss.yaml")
NAMESPACE = "demo"
JOBS = f"/apis/tfjob.dev/v1/namespaces/{NAMESPACE}/tfjobs"
STARTED = time.monotonic()
STALL_SECONDS = 45.0


class DemoError(RuntimeError):
    """An expected failure: its message says what went wrong, without a traceback."""


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


def banner(title: str) -> None:
    print(f"\n==> {title}", flush=True)


@contextmanager
def cluster(args: argparse.Namespace) -> Iterator[str]:
    """The kubeconfig of the cluster the demo runs on, for as long as it is needed."""
    if args.kubeconfig:
        banner(f"Using the cluster of {args.kubeconfig}")
        yield args.kubeconfig
        return
    if args.kind:
        reason = unavailable()
        if reason:
            raise DemoError(f"--kind: {reason}")
        banner("Creating a kind cluster and loading the images built from this checkout")
        workdir = cache_root() / "kind"
        workdir.mkdir(parents=True, exist_ok=True)
        kind = KindCluster(workdir, PROJECT_IMAGES, say=say)
        kind.start()
        try:
            yield str(kind.kubeconfig)
        finally:
            if args.keep and not kind.engine.private:
                print(f"    kind cluster {kind.name} kept: export KUBECONFIG={kind.kubeconfig}")
            else:
                if args.keep:
                    print("    --keep: the project's Docker engine stops with the demo")
                kind.stop()
        return
    banner("Starting the local cluster (the one `make cluster` runs)")
    print("    etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and")
    print("    kube-proxy built from source; containerd, runc and the CNI plugins from Debian;")
    print("    the node in namespaces of its own, CoreDNS for Service names")
    state_dir = cache_root() / "cluster"
    was_running = localcluster("status", state_dir).returncode == 0
    up = localcluster("up", state_dir)
    if up.returncode != 0:
        raise DemoError(f"the local cluster did not start:\n{up.stderr}")
    kubeconfig = up.stdout.strip().removeprefix("export KUBECONFIG=")
    say(f"cluster ready, KUBECONFIG={kubeconfig}")
    say(f"importing {', '.join(PROJECT_IMAGES)} into the node (built by `make images`)")
    loaded = localcluster("load", state_dir, *PROJECT_IMAGES)
    if loaded.returncode != 0:
        raise DemoError(f"the images could not be imported:\n{loaded.stderr}")
    try:
        yield kubeconfig
    finally:
        if args.keep or was_running:
            banner("The cluster keeps running")
            print(f"    export KUBECONFIG={kubeconfig}")
            print(f"    kubectl get tfjobs,pods -n {NAMESPACE}")
            print("    stop it with: make cluster-down")
        else:
            banner("Stopping the local cluster")
            localcluster("down", state_dir)


def localcluster(command: str, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tfjob_localcluster.cli",
            command,
            "--state-dir",
            str(state_dir),
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


class Progress:
    """Prints what changed since the last look: job states, pods, trainer lines."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self.states: dict[str, tuple[str, str]] = {}
        self.pods: dict[str, str] = {}
        self.log_lines: dict[str, int] = {}
        self.printed = 0  # lines shown: a sign of progress

    def say(self, message: str) -> None:
        self.printed += 1
        say(message)

    def poll(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = self.rest.get(JOBS)["items"]
        for job in jobs:
            self._job(job)
        pods = self.rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        for pod in pods:
            self._pod(pod)
        for gone in set(self.pods) - {p["metadata"]["name"] for p in pods}:
            del self.pods[gone]
            self.say(f"  pod/{gone:<24} deleted")
        return jobs

    def _job(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        latest = max(conditions, key=lambda c: c["lastUpdateTime"], default=None)
        if latest is None:
            return  # the operator has not seen it yet
        state = (status.get("state", "Created"), latest["message"])
        if self.states.get(name) != state:
            self.states[name] = state
            self.say(f"tfjob/{name}: {state[0]:<10} {state[1]}")

    def _pod(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if pod["metadata"].get("deletionTimestamp"):
            phase = "Terminating"
        if self.pods.get(name) != phase:
            self.pods[name] = phase
            self.say(f"  pod/{name:<24} {phase}")
        if phase in ("Running", "Succeeded", "Failed") and self._leads(pod):
            self._trainer_lines(name)

    @staticmethod
    def _leads(pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return (
            labels.get("tfjob.dev/job-role") == "chief"
            or labels.get("tfjob.dev/replica-type") == "evaluator"
        )

    def _trainer_lines(self, pod: str) -> None:
        log = trainer_log(self.rest, pod)
        if log is None:
            return
        lines = log.splitlines()
        for line in lines[self.log_lines.get(pod, 0) :]:
            if line.startswith("[") and (" epoch " in line or "evaluated" in line):
                self.say(f"    {pod}: {line}")
        self.log_lines[pod] = len(lines)


def trainer_log(rest: Rest, pod: str) -> str | None:
    """The log of the pod's trainer; None while there is none to read."""
    try:
        return rest.text(
            f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/log", {"container": "tensorflow"}
        )
    except (ApiError, OSError):
        return None


def results(rest: Rest, pod: str) -> dict[str, Any] | None:
    log = trainer_log(rest, pod)
    found = results_in(log.splitlines()) if log is not None else []
    return found[0] if found else None


def report(rest: Rest, jobs: list[dict[str, Any]]) -> bool:
    banner("Results")
    succeeded = True
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        name = job["metadata"]["name"]
        status = job.get("status") or {}
        state = status.get("state")
        succeeded &= state == "Succeeded"
        print(f"  {name}: {state}, restarts {status.get('restartCount', 0)}")
        leader = "chief-0" if "Chief" in job["spec"]["tfReplicaSpecs"] else "worker-0"
        for pod, role in ((f"{name}-{leader}", "trained"), (f"{name}-evaluator-0", "evaluated")):
            found = results(rest, pod)
            if found is None:
                continue
            print(
                f"    {role:<9} accuracy {found['accuracy']:.3f} "
                f"(threshold {found['accuracy_threshold']}), loss {found['loss']:.3f}, "
                f"{found['examples_per_second']:.0f} examples/s, "
                f"{found['replicas']} replica(s), strategy {found['strategy']}, "
                f"{found['wall_seconds']:.0f} s"
            )
    return succeeded


def run(kubeconfig: str, timeout: float) -> bool:
    banner("Installing the TFJob CRD and the operator with the Helm chart")
    say("helm upgrade --install tfjob-operator charts/tfjob-operator")
    install_operator(kubeconfig, say=say)
    say("the operator is running (a pod from its image, under the chart's service account)")
    rest = Rest.of_kubeconfig(kubeconfig)
    for node in rest.get("/api/v1/nodes")["items"]:
        say(describe_node(node))
    namespace = f"/api/v1/namespaces/{NAMESPACE}"
    with contextlib.suppress(ApiError):
        rest.request("DELETE", namespace)  # a kept cluster may hold an earlier demo's jobs
    while _exists(rest, namespace):
        time.sleep(0.5)
    rest.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    while not rest.get(f"{namespace}/serviceaccounts")["items"]:
        time.sleep(0.2)
    banner(f"Submitting {', '.join('examples/' + e for e in EXAMPLES)}")
    client = TFJobClient(NAMESPACE, rest=rest)
    claimed: set[str] = set()
    for name in EXAMPLES:
        # As `kubectl apply -f` does: the claim the example mounts (once), then the job.
        path = ROOT / "examples" / name
        claims = {
            d["metadata"]["name"]
            for d in yaml.safe_load_all(path.read_text())
            if d and d.get("kind") == "PersistentVolumeClaim"
        }
        job = client.create(path)
        for claim in sorted(claims - claimed):
            say(f"created persistentvolumeclaim/{claim}")
        claimed |= claims
        say(f"created tfjob/{job.name}")
    banner("Training (job states, pods, and the chief's and evaluator's progress)")
    progress = Progress(rest)
    stall = diagnose.StallWatch(STALL_SECONDS)

    def diagnosis() -> str:
        return (
            f"{diagnose.describe_pods(rest, NAMESPACE)}\noperator:\n"
            f"{diagnose.describe_pods(rest, chart.NAMESPACE, chart.SELECTOR)}"
        )

    deadline = time.monotonic() + timeout
    jobs = progress.poll()
    while not all((j.get("status") or {}).get("state") in ("Succeeded", "Failed") for j in jobs):
        stall.observe(progress.printed)
        stall.check("training", diagnosis)
        reason = chart.operator_stuck(chart.operator_pods(rest))
        if reason is not None:
            raise DemoError(f"the operator stopped working ({reason}):\n{diagnosis()}")
        if time.monotonic() > deadline:
            say(f"timed out after {timeout:.0f}s")
            break
        time.sleep(1)
        jobs = progress.poll()
    # The clean-up that follows success: ps and workers, which never exit, are deleted.
    for _ in range(5):
        time.sleep(1)
        progress.poll()
    return report(rest, jobs)


def describe_node(node: dict[str, Any]) -> str:
    """`node N: Ready, kubelet v1.34.4, containerd://1.6.20, 4 nvidia.com/gpu`."""
    status = node.get("status") or {}
    conditions = status.get("conditions") or []
    ready = next((c["status"] for c in conditions if c["type"] == "Ready"), "?")
    info = status.get("nodeInfo") or {}
    gpus = (status.get("allocatable") or {}).get("nvidia.com/gpu", "0")
    return (
        f"node {node['metadata']['name']}: Ready={ready}, kubelet {info.get('kubeletVersion')}, "
        f"{info.get('containerRuntimeVersion')}, {gpus} nvidia.com/gpu"
    )


def _exists(rest: Rest, path: str) -> bool:
    try:
        rest.get(path)
    except ApiError as error:
        if error.not_found:
            return False
        raise
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="run on this cluster instead of a local one")
    where.add_argument("--kind", action="store_true", help="run on a new kind cluster")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the jobs")
    args = parser.parse_args()
    try:
        with cluster(args) as kubeconfig:
            ok = run(kubeconfig, args.timeout)
    except (DemoError, LocalClusterError) as error:
        banner("The demo stopped")
        print(error, flush=True)
        return 1
    banner("Both TFJobs succeeded" if ok else "A TFJob did not succeed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
