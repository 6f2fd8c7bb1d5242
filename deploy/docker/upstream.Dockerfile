# The image of the upstream stage (`driftline upstream`): the driftline image plus what installs and
# sandboxes a release — node and npm (npm packages), python3 with venv (PyPI packages), bubblewrap and
# prlimit (util-linux). Build the driftline image first (repository root):
#   docker build -t driftline . && docker build -t driftline-upstream -f deploy/docker/upstream.Dockerfile .
# The chart runs it with upstream.image; the pod needs a seccomp profile that allows user namespaces
# (values upstream.seccompProfile).
ARG BASE=driftline
FROM ${BASE}
USER 0:0
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap util-linux nodejs npm python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
USER 10001:10001
