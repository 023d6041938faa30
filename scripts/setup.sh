#!/usr/bin/env bash
# Idempotent set-up: virtual environment in .venv with every dependency and extra.
# Second run is a no-op unless pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.setup-stamp"
WHEELS=../shared/wheels
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    exit 0
fi

# System packages through apt-get when missing: gfortran (escnn's py3nj is a Fortran
# extension built from source), gcc (pyg_lie's native kernels) and Debian's Fashion-MNIST
# (real images for `pyg-lie train vit`).
apt_pkgs=()
command -v gfortran >/dev/null 2>&1 || apt_pkgs+=(gfortran)
command -v cc >/dev/null 2>&1 || apt_pkgs+=(gcc)  # pyg_lie's native CPU kernels (built on first use)
[ -d /usr/share/datasets/fashion-mnist ] || apt_pkgs+=(dataset-fashion-mnist)
if [ ${#apt_pkgs[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "[setup] apt-get install ${apt_pkgs[*]}"
        SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq || true
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gfortran gcc >/dev/null 2>&1 \
            || command -v gfortran >/dev/null 2>&1 || { echo "[setup] could not install gfortran" >&2; exit 1; }
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 \
            || echo "[setup] dataset-fashion-mnist unavailable: pyg-lie train vit falls back to synthetic images"
    elif ! command -v gfortran >/dev/null 2>&1; then
        echo "[setup] gfortran missing and apt-get unavailable: install a Fortran compiler for escnn" >&2
        exit 1
    fi
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip setuptools wheel
# numpy<2 first: lie_learn (escnn) pins it, and torch-harmonics/e3nn accept it.
$PIP install -q "torch>=2.14,<2.15" "numpy<2"
$PIP install -q -e ".[escnn,test,docs,qm9,graphgym]"

if ! "$VENV/bin/python" -c "import torch_cluster" >/dev/null 2>&1; then
    torch_ver=$("$VENV/bin/python" -c "import torch; print(torch.__version__.split('+')[0])")
    py_tag=$("$VENV/bin/python" -c "import sys; print(f'cp{sys.version_info.major}{sys.version_info.minor}')")
    wheel=$(ls "$WHEELS"/torch_cluster-*-"$py_tag"-*.whl 2>/dev/null | head -n 1 || true)
    if [ -n "$wheel" ] && [ "$torch_ver" = "2.14.1" ]; then
        echo "[setup] torch-cluster from $wheel"
        $PIP install -q --no-deps "$wheel"
    else
        echo "[setup] building torch-cluster from source (about 15 minutes on 2 cores)"
        $PIP install -q --no-build-isolation "torch-cluster>=1.6.3"
    fi
fi
"$VENV/bin/python" -c "import pyg_lie, torch_cluster, escnn, torch_harmonics, e3nn" \
    || { echo "[setup] import check failed" >&2; exit 1; }
echo "$want" > "$STAMP"
echo "[setup] environment ready in $VENV"
