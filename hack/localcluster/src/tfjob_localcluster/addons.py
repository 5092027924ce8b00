"""What a cluster bootstrap (kubeadm) adds beyond the components: RBAC and CoreDNS.

Built as data and created through the API by the launcher:

- the API server's kubelet client may use the kubelet's API (logs, exec, port-forward),
  as kubeadm grants it;
- CoreDNS serves Service DNS (`<svc>.<ns>.svc.cluster.local`, pod hostnames under a
  headless Service) at the `kube-dns` Service's ClusterIP, from the image built here.
  Nothing outside the cluster is reachable from it, so it answers cluster names only.
  Records keep the plugin's default TTL of 5 s (kubeadm sets 30): a peer looked up
  before its pod has an address is cached as absent for that long, and TensorFlow
  tasks start at the same moment as their peers.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

KUBE_SYSTEM = "kube-system"
DNS_LABELS = {"k8s-app": "kube-dns"}


def kubelet_api_access(apiserver_user: str) -> list[tuple[str, Obj]]:
    binding: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kube-apiserver:kubelet-api-admin"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:kubelet-api-admin",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": apiserver_user}
        ],
    }
    return [("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)]


def corefile(cluster_domain: str) -> str:
    return (
        ".:53 {\n"
        "    errors\n"
        "    health {\n        lameduck 5s\n    }\n"
        "    ready\n"
        f"    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{\n"
        "        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n"
        "    }\n"
        "    prometheus :9153\n"
        "    cache 30\n"
        "    loop\n"
        "    reload\n"
        "}\n"
    )


def coredns(image: str, cluster_ip: str, cluster_domain: str) -> list[tuple[str, Obj]]:
    """(collection, object) pairs, in creation order."""
    name = "coredns"
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    core = f"/api/v1/namespaces/{KUBE_SYSTEM}"
    role: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:coredns"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["endpoints", "services", "pods", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:coredns"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:coredns",
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": KUBE_SYSTEM}],
    }
    account: Obj = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    config: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"Corefile": corefile(cluster_domain)},
    }
    ports = [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        {"name": "metrics", "port": 9153, "protocol": "TCP"},
    ]
    deployment: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": DNS_LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": DNS_LABELS},
            "template": {
                "metadata": {"labels": DNS_LABELS},
                "spec": {
                    "serviceAccountName": name,
                    "priorityClassName": "system-cluster-critical",
                    "dnsPolicy": "Default",
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": name,
                            "image": image,
                            "imagePullPolicy": "Never",
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": [
                                {
                                    "name": p["name"],
                                    "containerPort": p["port"],
                                    "protocol": p["protocol"],
                                }
                                for p in ports
                            ],
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "70Mi"},
                                "limits": {"memory": "170Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                            },
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": 8080},
                                "initialDelaySeconds": 10,
                                "periodSeconds": 10,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/ready", "port": 8181},
                                "periodSeconds": 2,
                            },
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                            ],
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": name}}],
                },
            },
        },
    }
    service: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "labels": DNS_LABELS},
        "spec": {"clusterIP": cluster_ip, "selector": DNS_LABELS, "ports": ports},
    }
    return [
        (f"{rbac}/clusterroles", role),
        (f"{rbac}/clusterrolebindings", binding),
        (f"{core}/serviceaccounts", account),
        (f"{core}/configmaps", config),
        (f"{core}/services", service),
        ("/apis/apps/v1/namespaces/kube-system/deployments", deployment),
    ]
