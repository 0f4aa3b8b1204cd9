#!/usr/bin/env bash
# Installs kiln's Debian dependencies, builds it, and generates a first image with the bundled
# demo model (models/kiln-shapes) on the CPU. KILN_CMAKE_ARGS adds CMake options (as for scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $(cat .ci/packages.txt) >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null  # e.g. -DCMAKE_CUDA_ARCHITECTURES=native
cmake --build build -j"$(nproc)"
build/kiln txt2img -m build/models/kiln-shapes.safetensors \
  -p "a red circle on a blue background" -W 128 -H 128 --steps 20 --cfg-scale 6 --seed 1 -o red-circle.png
echo "wrote red-circle.png"
