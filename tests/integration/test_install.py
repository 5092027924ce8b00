"""The Helm chart and the kustomize install, proven on the local cluster.

The installed operator runs as a pod from its image on the local cluster's node, under
the chart's ServiceAccount (its projected token, its RBAC), in a namespace that enforces
Pod Security "restricted", with a read-only root filesystem, and runs a TFJob to
Succeeded: that proves the RBAC is enough. The checkout's own operator is stopped
meanwhile so the installed one is alone.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from support.builders import shell_replica, tfjob
from support.checkout import ROOT
from support.scrape import scrape
from support.tfjobs import TFJobs
from support.waiting import wait_until

from tfjob_localcluster.addons.chart import (
    RELEASE,
    InstallError,
    default_values,
    install_operator,
    run_helm,
)
from tfjob_localcluster.checkout import CHART
from tfjob_localcluster.images.catalog import OPERATOR
from tfjob_operator.apiserver.sync import Rest
from tfjob_operator.client.forward import PortForward

#: The chart's operators: a leader and a standby.
REPLICAS = default_values()["replicaCount"]


class Helm:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = run_helm(self.kubeconfig, *args)
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done


@pytest.fixture(scope="module")
def helm(kubeconfig: str, project_images: tuple[str, ...]) -> Helm:
    """Helm against the session's cluster, whose node has the operator's image."""
    return Helm(kubeconfig)


@pytest.fixture(scope="module")
def release_namespace(core_v1: Any, kubectl: Any) -> Iterator[str]:
    """Where the chart is installed: Pod Security "restricted" is enforced there."""
    name = f"tfjob-system-{secrets.token_hex(3)}"
    core_v1.create_namespace(
        {
            "metadata": {
                "name": name,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            }
        }
    )
    yield name
    core_v1.delete_namespace(name, propagation_policy="Background")


def test_chart_lints_and_renders_what_the_api_server_accepts(
    helm: Helm, kubectl: Any, namespace: str, tfjob_crd: Path
) -> None:
    namespaced = [
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--set",
        "clusterDomain=cluster.local",
    ]
    multikueue = ["--set", "multiKueue.manager.enabled=true", "--set", "multiKueue.workerRole=true"]
    for values in ([], namespaced, multikueue):
        assert "0 chart(s) failed" in helm("lint", str(CHART), *values).stdout
        rendered = helm("template", RELEASE, str(CHART), "--namespace", namespace, *values).stdout
        applied = kubectl("apply", "--dry-run=server", "-f", "-", input=rendered).stdout
        assert f"deployment.apps/{RELEASE} created (server dry run)" in applied
        kind = "role" if values is namespaced else "clusterrole"
        assert f"{kind}.rbac.authorization.k8s.io/{RELEASE} created (server dry run)" in applied
        for role in ("multikueue-manager", "multikueue-worker"):
            made = f"clusterrole.rbac.authorization.k8s.io/{RELEASE}-{role} created"
            assert (made in applied) is (values is multikueue), (role, applied)
    bad = helm("template", RELEASE, str(CHART), "--set", "image.pullPolicy=Sometimes", check=False)
    assert bad.returncode != 0
    assert "pullPolicy" in bad.stderr


def test_kustomize_install_is_accepted_by_the_api_server(kubectl: Any, core_v1: Any) -> None:
    created = []
    for name in ("tfjob-system", "tfjob-jobs"):
        if kubectl("get", "namespace", name, check=False).returncode != 0:
            core_v1.create_namespace({"metadata": {"name": name}})
            created.append(name)
    try:
        for target in (
            "manifests/",
            "manifests/overlays/namespaced",
            "manifests/overlays/kubeflow",
        ):
            rendered = kubectl("kustomize", str(ROOT / target)).stdout
            applied = kubectl("apply", "--dry-run=server", "-f", "-", input=rendered).stdout
            assert "deployment.apps/tfjob-operator" in applied, applied
            assert "customresourcedefinition.apiextensions.k8s.io/tfjobs.tfjob.dev" in applied
        namespaced = kubectl("kustomize", str(ROOT / "manifests/overlays/namespaced")).stdout
        # The operator's own permissions are Roles; what stays cluster-wide is for users
        # (their roles, the role to read /metrics) and the reviews /metrics asks for.
        cluster_wide = {
            (o["kind"], o["metadata"]["name"])
            for o in yaml.safe_load_all(namespaced)
            if o["kind"] in ("ClusterRole", "ClusterRoleBinding")
        }
        assert cluster_wide == {
            *(("ClusterRole", f"tfjob-operator-{role}") for role in ("admin", "edit", "view")),
            ("ClusterRole", "tfjob-operator-metrics-reader"),
            ("ClusterRoleBinding", "tfjob-operator-auth-delegator"),
        }
        assert "--namespace=tfjob-jobs" in namespaced
        kubeflow = list(
            yaml.safe_load_all(
                kubectl("kustomize", str(ROOT / "manifests/overlays/kubeflow")).stdout
            )
        )
        crds = sorted(
            o["metadata"]["name"] for o in kubeflow if o["kind"] == "CustomResourceDefinition"
        )
        assert crds == ["tfjobs.kubeflow.org", "tfjobs.tfjob.dev"]
        (role,) = [
            o
            for o in kubeflow
            if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "tfjob-operator"
        ]
        assert all(r["apiGroups"] == ["tfjob.dev", "kubeflow.org"] for r in role["rules"][:2])
        (deployment,) = [o for o in kubeflow if o["kind"] == "Deployment"]
        assert "--kubeflow" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    finally:
        for name in created:
            core_v1.delete_namespace(name, propagation_policy="Background")


def test_installed_operator_runs_a_tfjob_under_the_chart_identity(
    helm: Helm,
    kubectl: Any,
    release_namespace: str,
    namespace: str,
    tfjob_crd: Path,
    session_operator_stopped: None,
    kubeconfig: str,
) -> None:
    helm(
        "install", RELEASE, str(CHART), "--namespace", release_namespace, "--wait", "--timeout=120s"
    )
    pod = _operator_pod(kubectl, release_namespace)
    assert pod["spec"]["serviceAccountName"] == RELEASE
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"] == OPERATOR
    # The image's files, read-only, as the uid the chart sets.
    probe = kubectl(
        "exec", "-n", release_namespace, pod["metadata"]["name"], "--",
        "sh", "-c", "id -u; touch /opt/app/x 2>&1; test -x /opt/app/bin/tfjob-operator",
        check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[0] == "65532"
    assert "Read-only file system" in probe.stdout
    tfjobs = TFJobs(kubeconfig, namespace)
    tfjobs.create(
        tfjob(
            "installed",
            {"Chief": shell_replica("sleep 1"), "Worker": shell_replica("sleep 3600", 2)},
        )
    )
    job = tfjobs.wait_state("installed", "Succeeded", 120)
    assert job["status"]["replicaStatuses"]["Chief"]["succeeded"] == 1
    tfjobs.wait_pods("installed", lambda p: len(p) == 1, "workers cleaned up")
    reporters = {e.get("reportingComponent") for e in tfjobs.events("installed")}
    assert reporters == {"tfjob-operator"}


def _allowed(
    k8s_client: Any, user: str, verb: str, group: str, resource: str, namespace: str, **more: str
) -> bool:
    """The API server's authorizer, asked for `user` (in system:authenticated)."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, namespace=namespace, **more
            ),
        )
    )
    answer = client.AuthorizationV1Api(k8s_client).create_subject_access_review(review)
    return bool(answer.status.allowed)


def test_users_bound_to_the_built_in_edit_and_view_roles_get_tfjobs(
    kubectl: Any, release_namespace: str, namespace: str, k8s_client: Any
) -> None:
    """The chart's user roles aggregate into Kubernetes' edit and view (the API server's
    ClusterRole aggregation fills them in): nothing TFJob-specific to bind."""
    rbac = client.RbacAuthorizationV1Api(k8s_client)
    for user, role in (("alice", "edit"), ("bob", "view")):
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": f"{user}-{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": user}],
            },
        )  # fmt: skip

    def can(user: str, verb: str, group: str = "tfjob.dev", **more: str) -> bool:
        return _allowed(k8s_client, user, verb, group, "tfjobs", namespace, **more)

    wait_until(
        lambda: can("alice", "create") and can("bob", "list"),
        30,
        "the user roles aggregated into edit and view",
        interval=0.5,
    )
    for verb in ("create", "get", "list", "watch", "update", "patch", "delete"):
        assert can("alice", verb), f"edit may {verb} TFJobs"
        assert can("alice", verb, "kubeflow.org"), f"edit may {verb} kubeflow.org TFJobs"
    assert can("alice", "get", subresource="status")
    assert not can("alice", "patch", subresource="status"), "the status is the operator's"
    for verb in ("get", "list", "watch"):
        assert can("bob", verb)
        assert can("bob", verb, "kubeflow.org")
    for verb in ("create", "update", "patch", "delete"):
        assert not can("bob", verb), f"view may not {verb} TFJobs"
    elsewhere = release_namespace
    assert not _allowed(k8s_client, "alice", "list", "tfjob.dev", "tfjobs", elsewhere)
    assert not _allowed(k8s_client, "alice", "create", "tfjob.dev", "tfjobs", elsewhere)
    # What following a job takes comes with edit already.
    for verb, resource, sub in (
        ("get", "pods", "log"),
        ("create", "pods", "portforward"),
        ("list", "events", ""),
        ("create", "persistentvolumeclaims", ""),
    ):
        assert _allowed(k8s_client, "alice", verb, "", resource, namespace, subresource=sub)


def test_metrics_are_served_over_https_to_a_reader_only(
    kubectl: Any, release_namespace: str, namespace: str, k8s_client: Any, kubeconfig: str
) -> None:
    """metrics.secure (the chart's default): a service account bound to the chart's
    metrics-reader role is served, another is forbidden, no token is unauthorized."""
    for account in ("scraper", "tenant"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
    kubectl(
        "create", "clusterrolebinding", f"{namespace}-scraper",
        f"--clusterrole={RELEASE}-metrics-reader", f"--serviceaccount={namespace}:scraper",
    )  # fmt: skip
    try:
        tokens = {
            account: kubectl("create", "token", account, "-n", namespace).stdout.strip()
            for account in ("scraper", "tenant")
        }
        rest = Rest.of_kubeconfig(kubeconfig)
        selector = "app.kubernetes.io/name=tfjob-operator"
        port = default_values()["metrics"]["port"]
        with PortForward(rest, release_namespace, selector, port) as forward:
            url = forward.url.replace("http://", "https://") + "metrics"
            served = wait_until(
                lambda: scrape(url, tokens["scraper"]),
                30,
                "the operator's /metrics through the port-forward",
                until=lambda answer: answer[0] == 200,
                interval=1,
            )
            assert "tfjob_operator_pods_created_total" in served[1]
            forbidden = scrape(url, tokens["tenant"])
            assert forbidden == (
                403,
                f"system:serviceaccount:{namespace}:tenant may not get /metrics\n",
            )
            assert scrape(url, None)[0] == 401
    finally:
        kubectl("delete", "clusterrolebinding", f"{namespace}-scraper")


def test_the_chart_runs_a_leader_and_a_standby_and_a_deleted_leaders_jobs_go_on(
    kubectl: Any, release_namespace: str, namespace: str, kubeconfig: str
) -> None:
    """Two operators, one named by the Lease; `kubectl delete pod` of the leader: it gives
    the Lease up as it stops, the standby takes it at once, and a running job goes on."""
    names = {p["metadata"]["name"] for p in _operator_pods(kubectl, release_namespace, REPLICAS)}
    lease = json.loads(
        kubectl("get", "lease", RELEASE, "-n", release_namespace, "-o", "json").stdout
    )
    leader = lease["spec"]["holderIdentity"]
    assert leader in names
    budget = json.loads(
        kubectl("get", "pdb", RELEASE, "-n", release_namespace, "-o", "json").stdout
    )
    assert budget["spec"]["minAvailable"] == 1
    tfjobs = TFJobs(kubeconfig, namespace)
    tfjobs.create(tfjob("through", {"Worker": shell_replica("sleep 15", 2)}))
    tfjobs.wait_state("through", "Running", 60)
    deleted = time.monotonic()
    kubectl("delete", "pod", leader, "-n", release_namespace, "--wait=false")
    (standby,) = names - {leader}
    while True:
        lease = json.loads(
            kubectl("get", "lease", RELEASE, "-n", release_namespace, "-o", "json").stdout
        )
        if lease["spec"]["holderIdentity"] == standby:
            break
        assert time.monotonic() - deleted < 15, f"the standby did not take over: {lease}"
        time.sleep(0.2)
    job = tfjobs.wait_state("through", "Succeeded", 90)
    assert job["status"]["restartCount"] == 0
    # The Deployment brings a new standby; both are ready again.
    _operator_pods(kubectl, release_namespace, REPLICAS)


def test_rbac_grants_exactly_what_the_operator_uses(
    k8s_client: Any, release_namespace: str
) -> None:
    """Asked of the API server's authorizer, not `kubectl auth can-i`: kubectl resolves a
    resource through discovery, and a group whose CRD is absent (Volcano's, say) would be
    checked as a core resource of that dotted name, which no role ever grants."""
    reviews = client.AuthorizationV1Api(k8s_client)

    def can(
        verb: str, group: str, resource: str, subresource: str = "", namespace: str | None = None
    ) -> bool:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{release_namespace}:{RELEASE}",
                groups=["system:serviceaccounts", f"system:serviceaccounts:{release_namespace}"],
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=subresource,
                    namespace=namespace,
                ),
            )
        )
        return bool(reviews.create_subject_access_review(review).status.allowed)

    # Leader election: its Lease in the release's namespace, and nowhere else.
    for verb in ("get", "watch", "create", "update"):
        assert can(verb, "coordination.k8s.io", "leases", namespace=release_namespace)
    assert not can("update", "coordination.k8s.io", "leases", namespace="kube-system")
    assert not can("delete", "coordination.k8s.io", "leases", namespace=release_namespace)

    for verb, group, resource, *subresource in [
        ("list", "tfjob.dev", "tfjobs"),
        ("watch", "tfjob.dev", "tfjobs"),
        ("delete", "tfjob.dev", "tfjobs"),
        # spec.managedBy mirrored from Kubeflow's runPolicy.managedBy for MultiKueue.
        ("patch", "tfjob.dev", "tfjobs"),
        ("patch", "tfjob.dev", "tfjobs", "status"),
        ("create", "", "pods"),
        ("delete", "", "pods"),
        ("watch", "", "services"),
        ("create", "", "events"),
        ("create", "scheduling.x-k8s.io", "podgroups"),
        ("watch", "scheduling.volcano.sh", "podgroups"),
        ("create", "kueue.x-k8s.io", "workloads"),
        ("patch", "kueue.x-k8s.io", "workloads", "status"),
        # The Workload MultiKueue made for a job dispatched here: read and adopted.
        ("get", "kueue.x-k8s.io", "workloads"),
        ("patch", "kueue.x-k8s.io", "workloads"),
        ("get", "kueue.x-k8s.io", "resourceflavors"),
        # A Workload's priority (integrations/kueue.py): the classes are read, never changed.
        ("get", "kueue.x-k8s.io", "workloadpriorityclasses"),
        ("get", "scheduling.k8s.io", "priorityclasses"),
        ("list", "scheduling.k8s.io", "priorityclasses"),
        # TensorBoards (integrations/tensorboard.py): created, watched, deleted; never changed.
        ("create", "apps", "deployments"),
        ("watch", "apps", "deployments"),
        ("delete", "apps", "deployments"),
        ("create", "networking.k8s.io", "networkpolicies"),
        ("watch", "networking.k8s.io", "networkpolicies"),
        ("delete", "networking.k8s.io", "networkpolicies"),
        # Disruption budgets (integrations/disruption.py): created, watched, deleted.
        ("create", "policy", "poddisruptionbudgets"),
        ("watch", "policy", "poddisruptionbudgets"),
        ("delete", "policy", "poddisruptionbudgets"),
        # Who may read /metrics (metrics_access.py).
        ("create", "authentication.k8s.io", "tokenreviews"),
        ("create", "authorization.k8s.io", "subjectaccessreviews"),
    ]:
        assert can(verb, group, resource, *subresource), (
            f"the operator needs {verb} {resource}.{group} {subresource}"
        )
    for verb, group, resource, *subresource in [
        ("update", "", "pods"),
        ("patch", "", "pods"),
        ("get", "", "secrets"),
        ("update", "tfjob.dev", "tfjobs"),
        ("patch", "apps", "deployments"),
        ("update", "apps", "deployments"),
        ("update", "networking.k8s.io", "networkpolicies"),
        ("update", "policy", "poddisruptionbudgets"),
        ("list", "", "nodes"),
        ("create", "", "pods", "exec"),
        ("update", "tfjob.dev", "tfjobs", "status"),
        ("update", "scheduling.x-k8s.io", "podgroups"),
        ("update", "kueue.x-k8s.io", "workloads"),
        ("list", "kueue.x-k8s.io", "resourceflavors"),
        ("update", "kueue.x-k8s.io", "workloadpriorityclasses"),
        ("create", "scheduling.k8s.io", "priorityclasses"),
    ]:
        assert not can(verb, group, resource, *subresource), (
            f"the operator must not be granted {verb} {resource}.{group} {subresource}"
        )


def test_helm_upgrade_to_a_namespaced_install_runs_tfjobs_with_roles_only(
    helm: Helm,
    kubectl: Any,
    release_namespace: str,
    namespace: str,
    session_operator_stopped: None,
    kubeconfig: str,
) -> None:
    """Changed values roll the operators; watchNamespaces swaps the ClusterRole for Roles."""
    before = {p["metadata"]["uid"] for p in _operator_pods(kubectl, release_namespace, REPLICAS)}
    helm(
        "upgrade", RELEASE, str(CHART), "--namespace", release_namespace, "--reuse-values",
        "--set", f"watchNamespaces={{{namespace}}}", "--set", "clusterDomain=cluster.local",
        "--set", "resources.limits.memory=384Mi", "--wait", "--timeout=180s",
    )  # fmt: skip
    pods = wait_until(
        lambda: _operator_pods(kubectl, release_namespace, REPLICAS),
        60,
        "the upgrade to replace the operator pods",
        until=lambda pods: not {p["metadata"]["uid"] for p in pods} & before,
        interval=0.5,
    )
    pod = pods[0]
    container = pod["spec"]["containers"][0]
    assert f"--namespace={namespace}" in container["args"]
    assert "--cluster-domain=cluster.local" in container["args"]
    assert container["resources"]["limits"]["memory"] == "384Mi"
    assert "REVISION: 2" in helm("status", RELEASE, "--namespace", release_namespace).stdout
    assert kubectl("get", "clusterrole", RELEASE, check=False).returncode != 0
    account = f"--as=system:serviceaccount:{release_namespace}:{RELEASE}"
    assert kubectl("auth", "can-i", "create", "pods", "-n", namespace, account).stdout == "yes\n"
    denied = kubectl("auth", "can-i", "create", "pods", "-A", account, check=False)
    assert denied.stdout.strip() == "no"

    tfjobs = TFJobs(kubeconfig, namespace)
    tfjobs.create(tfjob("namespaced", {"Worker": shell_replica("sleep 1", 2)}))
    job = tfjobs.wait_state("namespaced", "Succeeded", 120)
    worker = tfjobs.pods("namespaced")[0]
    config = next(
        e["value"] for e in worker["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"
    )
    assert f"namespaced-worker-1.{namespace}.svc.cluster.local:2222" in config
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] >= 1


def test_helm_uninstall_removes_the_operator_and_keeps_the_crd(
    helm: Helm, kubectl: Any, release_namespace: str
) -> None:
    helm("uninstall", RELEASE, "--namespace", release_namespace, "--wait", "--timeout=120s")
    for kind in ("deployment", "serviceaccount", "service"):
        left = kubectl("get", kind, "-n", release_namespace, "-o", "name").stdout
        assert RELEASE not in left, f"{kind} left behind: {left}"
    assert kubectl("get", "clusterrole", RELEASE, check=False).returncode != 0
    assert kubectl("get", "crd", "tfjobs.tfjob.dev").returncode == 0


def test_the_chart_rendered_with_no_cluster_and_applied_runs_a_tfjob(
    kubectl: Any,
    release_namespace: str,
    namespace: str,
    session_operator_stopped: None,
    kubeconfig: str,
    project_images: tuple[str, ...],
) -> None:
    """As Argo CD and Flux install a chart: `helm template --include-crds` with no
    cluster, then `kubectl apply --server-side` of what it printed; no Helm release. With
    a parent chart's values (the objects' name, labels on everything), the operator runs a
    TFJob; deleting what was applied (the CRDs aside) leaves nothing of it."""
    rendered = run_helm(
        Path("/nonexistent"), "template", "gitops", str(CHART), "--include-crds",
        f"--namespace={release_namespace}", "--set=fullnameOverride=tfjob-gitops",
        "--set=commonLabels.platform=ml", "--set=replicaCount=1",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    assert all(
        o["metadata"]["labels"]["platform"] == "ml"
        for o in objects
        if o["kind"] != "CustomResourceDefinition"
    )
    kubectl("apply", "--server-side", "-f", "-", input=rendered.stdout)
    owned = yaml.safe_dump_all([o for o in objects if o["kind"] != "CustomResourceDefinition"])
    try:
        (pod,) = _operator_pods(kubectl, release_namespace, 1)
        assert pod["metadata"]["labels"]["platform"] == "ml"
        assert pod["spec"]["serviceAccountName"] == "tfjob-gitops"
        tfjobs = TFJobs(kubeconfig, namespace)
        tfjobs.create(tfjob("gitops", {"Worker": shell_replica("sleep 1")}))
        tfjobs.wait_state("gitops", "Succeeded", 120)
    finally:
        kubectl("delete", "--wait=true", "--timeout=120s", "-f", "-", input=owned)
    left = kubectl(
        "get", "deployment,serviceaccount,role,rolebinding", "-n", release_namespace, "-o", "name"
    )
    assert "tfjob-gitops" not in left.stdout
    assert kubectl("get", "clusterrole", "tfjob-gitops", check=False).returncode != 0


def test_an_operator_that_cannot_start_is_diagnosed_at_once(
    helm: Helm, core_v1: Any, kubeconfig: str, namespace: str, tfjob_crd: Path
) -> None:
    """A broken value makes the operator exit at start: the install says so with the
    pod's CrashLoopBackOff, its exit code and its own error, well within a minute."""
    started = time.monotonic()
    with pytest.raises(InstallError) as failure:
        install_operator(
            kubeconfig,
            namespace,
            values=[f"watchNamespaces={{{namespace}}}", "extraArgs={--no-such-flag}"],
        )
    assert time.monotonic() - started < 60
    report = str(failure.value)
    assert "the operator cannot start" in report
    assert "CrashLoopBackOff" in report
    assert "last ended Error (exit code 3)" in report
    assert "unrecognized arguments: --no-such-flag" in report
    helm("uninstall", RELEASE, "--namespace", namespace, "--wait", "--timeout=60s")


def _operator_pod(kubectl: Any, namespace: str) -> dict[str, Any]:
    """One of the release's operator pods, once the chart's replicaCount of them run."""
    return _operator_pods(kubectl, namespace, default_values()["replicaCount"])[0]


def _operator_pods(kubectl: Any, namespace: str, replicas: int) -> list[dict[str, Any]]:
    """The running, not terminating, operator pods of the release, once there are
    `replicas` of them."""
    selector = "app.kubernetes.io/name=tfjob-operator"

    def running() -> list[dict[str, Any]]:
        listed = kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
        return [
            p
            for p in json.loads(listed.stdout)["items"]
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    found = wait_until(
        running,
        90,
        lambda found: (
            f"{replicas} running operator pods; running: "
            + ", ".join(p["metadata"]["name"] for p in found)
        ),
        until=lambda found: len(found) == replicas,
        interval=0.5,
    )
    return sorted(found, key=lambda p: str(p["metadata"]["name"]))
