# A kind node image for the pinned Kubernetes, assembled where kind's own node-image
# build cannot run (it pulls its base and most images from registries). kind/nodeimage.py
# stages the context and, after this build, preloads the images kubeadm runs into the
# node's containerd and sets the entrypoint, as kind's build does.
#
# The context (staged by kind/nodeimage.py):
#   kind-base/  the files of kind's base image, read from the sigs.k8s.io/kind module
#   bin/        kubelet, kubeadm, kubectl from hack/build-binaries.sh
#   tfjob/      localcluster/kind/node: this project's node setup, its unit, the default CNI
#   runc-without-sys-resource  localcluster/runtime's runtime wrapper
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
FROM ${BASE}
# The sandbox image the node's containerd runs (images/catalog.py's PAUSE), and the version kind
# reads from /kind/version.
ARG PAUSE
ARG KUBERNETES_VERSION
# systemd, containerd, runc and the CNI plugins from Debian; what kubelet, kube-proxy and
# kind's entrypoint run. Every unit the packages enabled is disabled: a node runs only
# the units kind's files and ours enable below.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       systemd systemd-sysv dbus \
       containerd runc containernetworking-plugins \
       conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 \
       pigz bash ca-certificates procps jq socat \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf
COPY kind-base/ /
COPY bin/ /usr/bin/
COPY tfjob/ /kind/tfjob/
COPY runc-without-sys-resource /usr/local/bin/runc-without-sys-resource
# kind's units name /usr/local/bin/containerd and CNI plugins in /opt/cni/bin; Debian
# installs them in /usr/bin and /usr/lib/cni.
RUN chmod 0755 /usr/local/bin/* /kind/bin/* /kind/tfjob/node-setup /usr/bin/kube* \
    && ln -s /usr/bin/containerd /usr/local/bin/containerd \
    && mkdir -p /opt/cni /etc/kubernetes/manifests /kind/manifests && ln -s /usr/lib/cni /opt/cni/bin \
    && echo "${KUBERNETES_VERSION}" > /kind/version \
    && cp /kind/tfjob/default-cni.yaml /kind/manifests/default-cni.yaml \
    && cp /kind/tfjob/default-storage.yaml /kind/manifests/default-storage.yaml \
    && ctr oci spec \
       | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
    && sed -i "s#sandbox_image = .*#sandbox_image = \"${PAUSE}\"#" /etc/containerd/config.toml \
    && cp /kind/tfjob/tfjob-node-setup.service /etc/systemd/system/ \
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service tfjob-node-setup.service \
    && systemctl mask systemd-binfmt.service
ENV container=docker
STOPSIGNAL SIGRTMIN+3
