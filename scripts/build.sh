#!/usr/bin/env bash
# Installs the dependencies (scripts/setup.sh), then configures comptrain in build/ and builds it.
# Usage: scripts/build.sh [--target NAME]... [extra cmake arguments]
# With no --target it builds everything (the libraries, the comptrain executable and its man page,
# the tests, the benchmarks, the Python module); with targets, only those and what they need
# (scripts/run.sh: comptrain and comptrain_man).
# In CI (CI=true) compiler warnings are errors.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

targets=()
cmake_args=()
while (($#)); do
  case $1 in
    --target)
      (($# >= 2)) || { echo "build.sh: --target needs a name" >&2; exit 2; }
      targets+=(--target "$2")
      shift 2
      ;;
    *)
      cmake_args+=("$1")
      shift
      ;;
  esac
done

bash "$root/scripts/setup.sh"

werror=OFF
if [[ "${CI:-}" == "true" ]]; then werror=ON; fi
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMPTRAIN_WERROR=$werror ${cmake_args[@]+"${cmake_args[@]}"}
cmake --build "$root/build" --parallel "$(nproc)" ${targets[@]+"${targets[@]}"}
