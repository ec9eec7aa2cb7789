#!/usr/bin/env bash
# Prepares what bench/run_vulkan_device.sh needs on the GPU machine (no glslc, no Vulkan headers,
# no loader there), small enough to carry (about 33 MB): trixie's glslc with the libraries it loads
# (scripts/coopmat-glslc.sh), the Vulkan headers, and gl/*.deb: the loader (libvulkan1) and the
# glvnd libraries the NVIDIA ICD needs. Then carry DIR and run
#   bench/run_vulkan_device.sh DIR [bench flags]
# Usage: scripts/vulkan-device-tools.sh DIR   (DIR inside the checkout: .carry/vktools; needs apt access)
set -euo pipefail
dir=$(realpath -m "${1:?usage: vulkan-device-tools.sh DIR}")
full=$(mktemp -d)
trap 'rm -rf "$full"' EXIT
"$(dirname "$0")/coopmat-glslc.sh" "$full" > /dev/null
rm -rf "$dir"
mkdir -p "$dir/root/usr/bin" "$dir/root/usr/lib/x86_64-linux-gnu" "$dir/root/usr/include" "$dir/gl"
cp "$full/glslc" "$dir/"
cp "$full/root/usr/bin/glslc" "$dir/root/usr/bin/"
lib="$full/root/usr/lib/x86_64-linux-gnu"
for f in ld-linux-x86-64.so.2 libshaderc.so.1 libstdc++.so.6 libstdc++.so.6.0.* libgcc_s.so.1 libc.so.6 libm.so.6; do
  cp -a "$lib"/$f "$dir/root/usr/lib/x86_64-linux-gnu/"
done
cp -r "$full/root/usr/include/vulkan" "$full/root/usr/include/vk_video" "$dir/root/usr/include/"
(cd "$dir/gl" && apt-get download libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2 2> /dev/null)
"$dir/glslc" --version | head -1
du -sh "$dir"
