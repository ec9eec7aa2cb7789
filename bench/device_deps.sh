#!/usr/bin/env bash
# Run by the GPU-machine scripts before cmake: what the project needs that the machine's image
# lacks, from the .debs carried in .carry/ (made here with `apt-get download`, since the machine
# reaches no network). Today: xxHash's headers and pkg-config file (libxxhash-dev; Ubuntu 24.04
# ships the library, not the -dev package). Carry ".carry/xxhash" for it.
cd "$(dirname "$0")/.." || exit 1
if ! pkg-config --exists libxxhash 2>/dev/null; then
  if compgen -G ".carry/xxhash/*.deb" >/dev/null; then
    for f in .carry/xxhash/*.deb; do dpkg -x "$f" /; done
    ldconfig
  else
    echo "device_deps: no libxxhash-dev here and none carried (apt-get download libxxhash-dev libxxhash0 into .carry/xxhash)" >&2
  fi
fi
