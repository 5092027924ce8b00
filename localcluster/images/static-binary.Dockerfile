# One statically linked binary of hack/build-binaries.sh (the Kubernetes control-plane
# components, etcd) FROM scratch, on PATH, as kubeadm's static pods run it:
#   --build-arg BINARY=kube-apiserver, with that tool's directory as the context.
FROM scratch
ARG BINARY
COPY ${BINARY} /usr/local/bin/${BINARY}
ENV PATH=/usr/local/bin
