// Loads the CUDA probe module (gpu_probe.hpp). The module is a separate shared object so that
// only `calibrate --device cuda` maps the CUDA runtime and cuBLAS: linked into the executable,
// they cost every comptrain process ~140 ms of start-up (measured on the 2-core VM).

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "comptrain/calibrate/gpu_probe.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::calibrate {

#ifdef COMPTRAIN_CUDA_PROBE_MODULE

bool built_with_cuda() { return true; }

std::unique_ptr<GpuProbe> open_cuda_probe() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("COMPTRAIN_CUDA_PROBE"); env && *env) {
    candidates.emplace_back(env);
  } else {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back(exe.parent_path() / std::filesystem::path(COMPTRAIN_CUDA_PROBE_MODULE).filename());
    candidates.emplace_back(COMPTRAIN_CUDA_PROBE_MODULE);
  }
  std::string tried;
  for (const auto& path : candidates) {
    if (!std::filesystem::exists(path)) {
      tried += "\n  " + path.string() + ": no such file";
      continue;
    }
    // Never closed: the probe's code lives in the module for the rest of the process.
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) {
      tried += "\n  " + path.string() + ": " + dlerror();
      continue;
    }
    using Open = GpuProbe* (*)();
    auto open = reinterpret_cast<Open>(dlsym(module, "comptrain_open_cuda_probe"));
    if (!open) throw InputError("--device cuda: " + path.string() + " has no comptrain_open_cuda_probe; rebuild comptrain");
    return std::unique_ptr<GpuProbe>(open());
  }
  throw InputError("--device cuda: cannot load the CUDA probe module (set COMPTRAIN_CUDA_PROBE to its path):" + tried);
}

#else

bool built_with_cuda() { return false; }

std::unique_ptr<GpuProbe> open_cuda_probe() {
  throw InputError(
      "--device cuda: this comptrain was built without CUDA (nvcc was not found when CMake configured it); "
      "install the CUDA Toolkit, reconfigure, or use --device cpu");
}

#endif

}  // namespace comptrain::calibrate
