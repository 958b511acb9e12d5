#!/usr/bin/env bash
# Run on a machine with network (the CPU development machine), before a GPU run:
#   kernels/cuda/fetch_debs.sh
# Fetches the Debian packages for what the GPU machine lacks (GoogleTest as a prebuilt library
# and as source, nlohmann/json: about 1 MB together) into kernels/cuda/debs/, which git ignores (kernels/cuda/.gitignore). Carry
# that folder to the GPU machine (device run: carry ["kernels/cuda/debs"]); check_on_gpu.sh
# unpacks them with dpkg -x into a private prefix, never into /.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/debs"
cd "$here/debs"
rm -f ./*.deb
apt-get download libgtest-dev googletest nlohmann-json3-dev
ls -l ./*.deb
sha256sum ./*.deb > SHA256SUMS
echo "fetched into $here/debs ($(du -sh . | cut -f1)); carry kernels/cuda/debs to the GPU machine"
