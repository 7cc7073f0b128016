#!/usr/bin/env bash
# Install what the MPI transport needs to build and run (Open MPI, and
# libclang for the bindings), from Debian's packages, when missing.
set -euo pipefail
if command -v mpirun >/dev/null && command -v mpicc >/dev/null && ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev clang libclang-dev >/dev/null
mpirun --version | head -n 1
