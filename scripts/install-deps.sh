#!/usr/bin/env bash
# Installs what Pylon builds and runs with, from Debian/Ubuntu packages, when missing.
# Usage: scripts/install-deps.sh [--with-torch]   (--with-torch: PyTorch to remake golden data)
# The coopmat GEMM needs a newer glslc than Debian 12's: scripts/coopmat-glslc.sh DIR (optional).
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libopenblas-openmp-dev libsentencepiece-dev nlohmann-json3-dev
          libxxhash-dev  # checksums of checkpoint files and edge tensors
          libpcre2-dev libunistring-dev  # tokenizer.json: split patterns, NFC
          libgtest-dev fortunes libgloo-dev libopenmpi-dev openmpi-bin
          libvulkan-dev glslc mesa-vulkan-drivers  # Vulkan: headers + loader, GLSL -> SPIR-V, lavapipe
          clang-14 libclang-rt-14-dev  # fuzz/: libFuzzer and its sanitizers (scripts/fuzz.sh)
          python3)  # scripts/hostile.py (the standard library only)
[[ "${1:-}" == "--with-torch" ]] && packages+=(python3-torch libopenblas0-pthread)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
