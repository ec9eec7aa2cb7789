#!/usr/bin/env bash
# Prepares a glslc that compiles GL_KHR_cooperative_matrix (Debian 12's cannot) and Vulkan headers
# that declare VK_KHR_cooperative_matrix: Debian trixie's glslc, libshaderc1, libvulkan-dev and the
# C/C++ runtime they need, unpacked into DIR (never into /) and run through their own loader.
# Prints the CMake flags that use them. Optional: without it the coopmat GEMM is left out.
# Usage: scripts/coopmat-glslc.sh DIR        (needs apt access to deb.debian.org)
set -euo pipefail
dir=$(realpath -m "${1:?usage: coopmat-glslc.sh DIR}")
mkdir -p "$dir/debs" "$dir/apt/lists/partial" "$dir/apt/cache" "$dir/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  > "$dir/apt/sources.list"
o=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
   -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache")
apt-get "${o[@]}" update -qq
(cd "$dir/debs" && apt-get "${o[@]}" download glslc libshaderc1 libvulkan-dev libc6 libstdc++6 libgcc-s1)
for f in "$dir"/debs/*.deb; do dpkg -x "$f" "$dir/root"; done
lib="$dir/root/usr/lib/x86_64-linux-gnu"
cat > "$dir/glslc" <<WRAP
#!/bin/sh
# trixie's glslc through trixie's own dynamic loader and libraries
d=\$(dirname "\$(readlink -f "\$0")")/root/usr/lib/x86_64-linux-gnu
exec "\$d/ld-linux-x86-64.so.2" --library-path "\$d" "\$d/../../bin/glslc" "\$@"
WRAP
chmod +x "$dir/glslc"
"$dir/glslc" --version | head -1
echo "cmake flags: -DPYLON_GLSLC_COOPMAT=$dir/glslc -DVulkan_INCLUDE_DIR=$dir/root/usr/include"
