#!/usr/bin/env bash
# Installs the `kubernetes` Python package (pinned) into batchlab's venv, creating the venv when
# it is missing: tests/distributed_k8s.rs checks the Kubernetes manifests against its models.
# Idempotent: skipped when the pinned version is there. Needs only PyPI.
#
#   BATCHLAB_HOME  where the venv lives (default ~/.cache/batchlab), shared with setup-vllm.sh
#   PYTHON         the interpreter to build the venv from (default python3)
set -euo pipefail

KUBERNETES_VERSION=37.0.2
HOME_DIR="${BATCHLAB_HOME:-$HOME/.cache/batchlab}"
VENV="$HOME_DIR/venv"
PY="$VENV/bin/python"

log() { printf 'setup-kubernetes: %s\n' "$*"; }

if [[ -x "$PY" ]] && "$PY" -c "import kubernetes, sys; sys.exit(kubernetes.__version__ != '$KUBERNETES_VERSION')" 2>/dev/null; then
    log "kubernetes $KUBERNETES_VERSION in $VENV, skipped"
    exit 0
fi
mkdir -p "$HOME_DIR"
if [[ ! -x "$PY" ]]; then
    log "creating venv $VENV with $(${PYTHON:-python3} --version 2>&1)"
    "${PYTHON:-python3}" -m venv "$VENV"
fi
log "installing kubernetes $KUBERNETES_VERSION"
"$PY" -m pip install --quiet "kubernetes==$KUBERNETES_VERSION"
