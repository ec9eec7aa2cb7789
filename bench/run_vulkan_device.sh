#!/usr/bin/env bash
# On the GPU machine (no glslc, no Vulkan headers, no loader there): builds Pylon's Vulkan parts
# with carried tools, runs every Vulkan test (the coopmat GEMM against the plain one included) and
# the edge benchmark at the seed size. TOOLS: a folder made by scripts/coopmat-glslc.sh, plus
# gl/*.deb: libvulkan1 (the loader) and libglvnd0, libglx0, libegl1, libgl1, libopengl0, libgles2
# (the NVIDIA ICD, libGLX_nvidia, needs glvnd: without them vkCreateInstance finds no driver).
# Logs go to $OUT (or ./vulkan-logs). TESTS_TIMEOUT / BENCH_TIMEOUT (seconds, default 400 / 300)
# bound the two steps (the Vulkan suite took over 200 s on the H200 on 2026-12-03); TESTS (default 'Vulkan*') is the gtest filter. The build stays in /tmp/vkb
# for further runs in the same call.
# Usage, from the repo root there: bench/run_vulkan_device.sh TOOLS [bench flags...]
set -u
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
tools=$(realpath "${1:?usage: run_vulkan_device.sh TOOLS [bench flags]}")
shift
out=${OUT:-vulkan-logs}
mkdir -p "$out"
for f in "$tools"/gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
loader=$(ldconfig -p | awk '/libvulkan.so.1 /{print $NF; exit}')
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
if ! { cmake -S . -B /tmp/vkb -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=OFF -DPYLON_MPI=OFF \
         -DPYLON_VULKAN=ON -DVulkan_INCLUDE_DIR="$tools/root/usr/include" -DVulkan_LIBRARY="$loader" \
         -DVulkan_GLSLC_EXECUTABLE="$tools/glslc" -DPYLON_GLSLC_COOPMAT="$tools/glslc" > "$out/cmake.txt" 2>&1 &&
       ninja -C /tmp/vkb pylon_tests pylon_bench_vulkan > "$out/build.txt" 2>&1; }; then
  tail -n 30 "$out/cmake.txt" "$out/build.txt"
  exit 1
fi
echo "built in $SECONDS s"
grep -E "Pylon:|coopmat" "$out/cmake.txt"
timeout ${TESTS_TIMEOUT:-400} /tmp/vkb/tests/pylon_tests --gtest_filter="${TESTS:-Vulkan*}" > "$out/tests.txt" 2>&1
echo "tests exit $? at $SECONDS s" >> "$out/tests.txt"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ vulkan \]|tests exit|Failure" "$out/tests.txt" | head -40
timeout ${BENCH_TIMEOUT:-300} /tmp/vkb/bench/pylon_bench_vulkan --dir /dev/shm "$@" > "$out/bench.txt" 2>&1
echo "bench exit $? at $SECONDS s" >> "$out/bench.txt"
cat "$out/bench.txt"
