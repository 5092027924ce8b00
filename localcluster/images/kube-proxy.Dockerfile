# kube-proxy with the iptables and conntrack tools its iptables mode runs. The context
# is the directory hack/build-binaries.sh built Kubernetes into.
ARG BASE=python:3.11.14-slim-bookworm
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables conntrack ipset kmod \
    && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy
