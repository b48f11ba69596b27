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
# Release at -O2, without debug information: CMake's Release default, -O3, compiles about half
# again as slowly as -O2, and -g about half again (models/src/platform.cpp: 7.6 s at -O2, 11.4 s at
# -O3, 11.2 s at -O2 -g, CPU time on the development VM), for the same results (no -ffast-math:
# floating point is not reassociated at either level). Developers who configure by hand get
# RelWithDebInfo (the top CMakeLists.txt's default).
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
  -DCOMPTRAIN_WERROR=$werror ${cmake_args[@]+"${cmake_args[@]}"}
cmake --build "$root/build" --parallel "$(nproc)" ${targets[@]+"${targets[@]}"}
