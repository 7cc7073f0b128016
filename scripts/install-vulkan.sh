#!/usr/bin/env bash
# Install a Vulkan implementation that runs on the CPU (Mesa's lavapipe) and
# the Vulkan loader, from Debian's packages, when missing: the wgpu backend's
# tests run on it where no GPU is present.
set -euo pipefail
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && ldconfig -p | grep -q libvulkan.so.1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null
ls /usr/share/vulkan/icd.d/
