#!/usr/bin/env bash
# On the GPU machine, after bench/run_vulkan_device.sh TOOLS (which unpacks the tools' libraries):
# builds another tree's pylon_bench_vulkan with the same flags, for A/B runs in the same call.
# Make the tree here first: `git archive REV | tar -x -C ab_old` (untracked, so it travels with
# the working tree; never commit it). Logs go to $OUT (or ./vulkan-logs).
# Usage, from the repo root there: bench/build_vulkan_ab.sh TOOLS SRC BUILD
set -u
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
tools=$(realpath "${1:?usage: build_vulkan_ab.sh TOOLS SRC BUILD}")
src=${2:?usage: build_vulkan_ab.sh TOOLS SRC BUILD}
bld=${3:?usage: build_vulkan_ab.sh TOOLS SRC BUILD}
out=${OUT:-vulkan-logs}
name=$(basename "$bld")
mkdir -p "$out"
loader=$(ldconfig -p | awk '/libvulkan.so.1 /{print $NF; exit}')
if ! { cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=OFF -DPYLON_MPI=OFF \
         -DPYLON_VULKAN=ON -DVulkan_INCLUDE_DIR="$tools/root/usr/include" -DVulkan_LIBRARY="$loader" \
         -DVulkan_GLSLC_EXECUTABLE="$tools/glslc" -DPYLON_GLSLC_COOPMAT="$tools/glslc" > "$out/${name}_cmake.txt" 2>&1 &&
       ninja -C "$bld" pylon_bench_vulkan > "$out/${name}_build.txt" 2>&1; }; then
  tail -n 30 "$out/${name}_cmake.txt" "$out/${name}_build.txt"
  exit 1
fi
echo "built $src in $bld"
