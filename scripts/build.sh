#!/usr/bin/env bash
# Installs the dependencies (scripts/setup.sh), then configures and builds comptrain in build/.
# Usage: scripts/build.sh [extra cmake arguments]
# In CI (CI=true) compiler warnings are errors.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"

werror=OFF
if [[ "${CI:-}" == "true" ]]; then werror=ON; fi
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMPTRAIN_WERROR=$werror "$@"
cmake --build "$root/build" --parallel "$(nproc)"
