#!/usr/bin/env bash
# Builds the calculator page (web/index.html + vramsim.js, the simulator compiled to WebAssembly) into
# build-web/web with Debian's emscripten: `apt-get install emscripten` (3.1.6 in Debian 12), plus the
# header-only libraries the native build uses (libfmt-dev, nlohmann-json3-dev, libcli11-dev,
# libboost-graph-dev). Usage: web/build.sh [BUILD_DIR] (default build-web). Jobs: $SIM_WEB_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-web}
if ! command -v emcmake >/dev/null 2>&1; then
  echo "web/build.sh: emcmake not found (Debian: apt-get install emscripten)" >&2
  exit 2
fi
# Debian's emscripten runs its JavaScript optimizer with node and requires Debian's node-acorn, which lives
# in /usr/share/nodejs; a node from elsewhere (nodesource) does not look there by itself.
export NODE_PATH=${NODE_PATH:+$NODE_PATH:}/usr/share/nodejs
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
emcmake cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DSIM_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$build_dir" -j"${SIM_WEB_JOBS:-2}" --target vramsim_web
echo "web/build.sh: open $build_dir/web/index.html"
