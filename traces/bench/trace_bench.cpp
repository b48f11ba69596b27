// How the cost of building a trace grows with the model: a GPT (zoo model `gpt`) at 12 to 1536
// layers, built through zoo::build_model as the run layer does (the builder, then the
// traces::Trace constructor: validation, views, the dependency graph, the order check).
//
// Counters (per op, so that a flat row means linear growth):
//   s/op          CPU time per op of the trace (the timer is CPU time);
//   edges/op      dependency edges per op;
//   heap peak/op  the most heap bytes live at once while building, per op (counted by this
//                 program's operator new/delete, so it does not depend on earlier benchmarks);
//   heap kept/op  heap bytes the finished Trace holds, per op.
// Plus ops, edges and the process's peak RSS so far (monotone over the run; the rows run in
// order of depth).

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <optional>

#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

// ---- Heap accounting ------------------------------------------------------------------------
// Every C++ allocation of the program goes through these; sizes are malloc's usable sizes, so
// a free subtracts exactly what its allocation added.
namespace {
std::atomic<std::int64_t> g_heap_live{0};
std::atomic<std::int64_t> g_heap_peak{0};

void* counted_allocate(std::size_t size, std::size_t alignment) {
  void* p = alignment > alignof(std::max_align_t) ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                                                  : std::malloc(size == 0 ? 1 : size);
  if (!p) throw std::bad_alloc();
  const std::int64_t live = g_heap_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p))) +
                            static_cast<std::int64_t>(malloc_usable_size(p));
  std::int64_t peak = g_heap_peak.load();
  while (live > peak && !g_heap_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}
void counted_free(void* p) noexcept {
  if (!p) return;
  g_heap_live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t size) { return counted_allocate(size, 0); }
void* operator new[](std::size_t size) { return counted_allocate(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) { return counted_allocate(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return counted_allocate(size, static_cast<std::size_t>(a)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_allocate(size, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace {

using namespace comptrain;

zoo::ModelRequest gpt(std::int64_t layers) {
  zoo::ModelRequest request;
  request.model = "gpt";  // the GPT-3 XL shape of the zoo's defaults: hidden 2048, 16 heads, sequence 2048
  request.layers = layers;
  request.batch_size = 1;
  return request;
}

double peak_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // kilobytes on Linux
}

void BM_BuildGptTrace(benchmark::State& state) {
  const zoo::ModelRequest request = gpt(state.range(0));
  std::size_t ops = 0;
  std::size_t edges = 0;
  std::int64_t peak = 0;
  std::int64_t kept = 0;
  for (auto _ : state) {
    const std::int64_t before = g_heap_live.load();
    g_heap_peak.store(before);
    std::optional<traces::Trace> trace(zoo::build_model(request));
    peak = g_heap_peak.load() - before;
    kept = g_heap_live.load() - before;
    ops = trace->ops().size();
    edges = boost::num_edges(trace->graph());
    benchmark::DoNotOptimize(trace);
    trace.reset();
  }
  const double n = static_cast<double>(ops);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * ops));
  state.counters["ops"] = n;
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["edges/op"] = static_cast<double>(edges) / n;
  state.counters["s/op"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["heap peak/op"] = benchmark::Counter(static_cast<double>(peak) / n, benchmark::Counter::kDefaults,
                                                      benchmark::Counter::OneK::kIs1024);
  state.counters["heap kept/op"] = benchmark::Counter(static_cast<double>(kept) / n, benchmark::Counter::kDefaults,
                                                      benchmark::Counter::OneK::kIs1024);
  state.counters["max RSS"] = benchmark::Counter(peak_rss_bytes(), benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
}

}  // namespace

BENCHMARK(BM_BuildGptTrace)->Arg(12)->Arg(48)->Arg(192)->Arg(768)->Arg(1536)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
