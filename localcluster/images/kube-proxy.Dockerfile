# kube-proxy with the iptables and conntrack tools its iptables mode runs. The context
# is the directory hack/build-binaries.sh built Kubernetes into.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables conntrack ipset kmod \
    && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy
