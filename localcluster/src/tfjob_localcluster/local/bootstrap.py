"""What a cluster bootstrap (kubeadm, kind) adds beyond the components: RBAC, CoreDNS and
the default StorageClass.

Built as data and created through the API by the launcher:

- the API server's kubelet client may use the kubelet's API (logs, exec, port-forward),
  as kubeadm grants it;
- CoreDNS serves Service DNS (`<svc>.<ns>.svc.cluster.local`, pod hostnames under a
  headless Service) at the `kube-dns` Service's ClusterIP, from the image built here.
  Nothing outside the cluster is reachable from it, so it answers cluster names only.
  Records keep the plugin's default TTL of 5 s (kubeadm sets 30): a peer looked up
  before its pod has an address is cached as absent for that long, and TensorFlow
  tasks start at the same moment as their peers.
- The default StorageClass, `standard`, provisions volumes with Rancher's
  local-path-provisioner, as kind's node images do: a PersistentVolumeClaim gets a
  directory of the node under LOCAL_PATH_ROOT (on the local cluster, in the node's state
  dir: its /var/lib is the node's own), bound once a pod using it is scheduled
  (WaitForFirstConsumer), so the volume is on that pod's node and every later pod of the
  claim goes there too. The helper pods that make and remove the directories run busybox.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

Obj = dict[str, Any]

KUBE_SYSTEM = "kube-system"
DNS_LABELS = {"k8s-app": "kube-dns"}
#: Where kind names its default StorageClass, and the provisioner it runs.
STORAGE_CLASS = "standard"
LOCAL_PATH = "local-path-provisioner"
LOCAL_PATH_NAMESPACE = "local-path-storage"
LOCAL_PATH_NAME = "rancher.io/local-path"
LOCAL_PATH_ROOT = "/var/lib/local-path-provisioner"
RBAC = "rbac.authorization.k8s.io/v1"


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


def _local_path_config(helper_image: str) -> dict[str, str]:
    """The provisioner's ConfigMap: where volumes go, how a helper makes and removes them."""
    helper: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "helper-pod", "image": helper_image, "imagePullPolicy": "IfNotPresent"}
            ],
        },
    }
    paths = {
        "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [LOCAL_PATH_ROOT]}]
    }
    return {
        "config.json": json.dumps(paths, indent=2),
        "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
        "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
        "helperPod.yaml": yaml.safe_dump(helper, sort_keys=False),
    }


def local_path_storage(image: str, helper_image: str) -> list[tuple[str, Obj]]:
    """The default StorageClass and its provisioner: (collection, object) pairs, in
    creation order (kind applies the same objects from its node image's manifest)."""
    namespace = LOCAL_PATH_NAMESPACE
    account = f"{LOCAL_PATH}-service-account"
    labels = {"app": LOCAL_PATH}
    core = f"/api/v1/namespaces/{namespace}"
    rbac = f"/apis/{RBAC}"
    role_rules = [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        }
    ]
    cluster_rules = [
        {
            "apiGroups": [""],
            "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [""],
            "resources": ["persistentvolumes"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {
            "apiGroups": ["storage.k8s.io"],
            "resources": ["storageclasses"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]

    def role(kind: str, rules: list[Obj]) -> Obj:
        meta: Obj = {"name": f"{LOCAL_PATH}-role"}
        if kind == "Role":
            meta["namespace"] = namespace
        return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}

    def binding(kind: str, role_kind: str) -> Obj:
        meta: Obj = {"name": f"{LOCAL_PATH}-bind"}
        if kind == "RoleBinding":
            meta["namespace"] = namespace
        return {
            "apiVersion": RBAC,
            "kind": kind,
            "metadata": meta,
            "roleRef": {
                "apiGroup": RBAC.split("/")[0],
                "kind": role_kind,
                "name": f"{LOCAL_PATH}-role",
            },
            "subjects": subject,
        }

    health = {"name": "health", "containerPort": 8080, "protocol": "TCP"}
    deployment: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": LOCAL_PATH, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    "priorityClassName": "system-cluster-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": LOCAL_PATH,
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": [
                                LOCAL_PATH,
                                "start",
                                "--config",
                                "/etc/config/config.json",
                                "--helper-image",
                                helper_image,
                            ],
                            "ports": [health],
                            "env": [
                                {
                                    "name": "POD_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                                {"name": "CONFIG_MOUNT_PATH", "value": "/etc/config/"},
                            ],
                            "readinessProbe": {
                                "httpGet": {"path": "/ready", "port": "health"},
                                "periodSeconds": 2,
                            },
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": "health"},
                                "initialDelaySeconds": 10,
                                "periodSeconds": 10,
                            },
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": False},
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/config/"}],
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": "local-path-config"}}],
                },
            },
        },
    }
    storage_class: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": LOCAL_PATH_NAME,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }
    config: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "local-path-config", "namespace": namespace},
        "data": _local_path_config(helper_image),
    }
    return [
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        ),
        (
            f"{core}/serviceaccounts",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": namespace},
            },
        ),
        (f"{rbac}/namespaces/{namespace}/roles", role("Role", role_rules)),
        (f"{rbac}/clusterroles", role("ClusterRole", cluster_rules)),
        (f"{rbac}/namespaces/{namespace}/rolebindings", binding("RoleBinding", "Role")),
        (f"{rbac}/clusterrolebindings", binding("ClusterRoleBinding", "ClusterRole")),
        (f"{core}/configmaps", config),
        (f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment),
        ("/apis/storage.k8s.io/v1/storageclasses", storage_class),
    ]
