#include "comptrain/models/kernel_fusion.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"

namespace comptrain::models {
namespace {

using traces::OpKind;
using traces::TensorIndex;
using traces::TensorRole;

// Builds a forward-only trace of [4, 1024] fp32 tensors (16 KiB each) op by op.
class TraceBuilder {
 public:
  TensorIndex tensor(const std::string& name, TensorRole role = TensorRole::temporary, std::vector<std::int64_t> shape = {4, 1024}) {
    traces::Tensor t;
    t.id = tensors_.size() + 1;
    t.name = name;
    t.dtype = traces::DType::f32;
    t.shape = std::move(shape);
    t.role = role;
    t.batch_dim = 0;
    tensors_.push_back(t);
    return tensors_.size() - 1;
  }
  void op(const std::string& name, OpKind kind, std::vector<TensorIndex> inputs, std::vector<TensorIndex> outputs) {
    traces::Op o;
    o.id = ops_.size() + 1;
    o.name = name;
    o.kind = kind;
    std::int64_t read = 0;
    std::int64_t written = 0;
    for (const TensorIndex t : inputs) read += tensors_[t].bytes() / tensors_[t].shape.front();
    for (const TensorIndex t : outputs) written += tensors_[t].bytes() / tensors_[t].shape.front();
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    o.flops = {0, 1024};
    o.bytes_read = {0, read};
    o.bytes_written = {0, written};
    ops_.push_back(o);
  }
  traces::Trace build() const { return traces::Trace("fusion", 4, tensors_, ops_); }

 private:
  std::vector<traces::Tensor> tensors_;
  std::vector<traces::Op> ops_;
};

// A GPU of round numbers (1 TB/s, 1 PFLOP/s, 5 us a launch, every efficiency 1), so that an op's
// time is its bytes or FLOPs over the rate plus its launches.
Platform test_platform() {
  return parse_platform(
      "name: test\n"
      "gpu: {name: Test GPU, memory: 16 GiB, memory_bandwidth: 1 TB/s, peak: {fp32: 1000 TFLOP/s, tf32: 0, fp16: 1000 TFLOP/s, bf16: 0}, launch_overhead: 5 us}\n"
      "host: {name: Test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"
      "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n"
      "efficiency: {compute: {default: 1}, memory: {default: 1}}\n",
      "test.yaml");
}

constexpr double kTensorBytes = 4 * 1024 * 4;

// x -> a -> t1 -> b -> t2 -> lin -> t3 -> c(t3, t1) -> t4: a and b fuse; c reads t1 too, but
// joining it to a would put the GEMM between two ops of one kernel (a cycle), so it stays apart.
traces::Trace chain_with_a_gemm_between(const std::string& a_name = "m.0.a", const std::string& b_name = "m.0.b") {
  TraceBuilder b;
  const TensorIndex x = b.tensor("x", TensorRole::input);
  const TensorIndex w = b.tensor("w", TensorRole::weight);
  const TensorIndex t1 = b.tensor("t1");
  const TensorIndex t2 = b.tensor("t2");
  const TensorIndex t3 = b.tensor("t3");
  const TensorIndex t4 = b.tensor("t4");
  b.op(a_name, OpKind::elementwise, {x}, {t1});
  b.op(b_name, OpKind::elementwise, {t1}, {t2});
  b.op("m.0.lin", OpKind::linear, {t2, w}, {t3});
  b.op("m.0.c", OpKind::elementwise, {t3, t1}, {t4});
  return b.build();
}

TEST(KernelFusion, FusesAChainButNeverAcrossAGemmThatFeedsIt) {
  const traces::Trace trace = chain_with_a_gemm_between();
  const KernelFusion fusion = fuse_like_inductor(trace, CompileScope{});
  ASSERT_EQ(fusion.ops.size(), 4u);
  EXPECT_EQ(fusion.groups, 1u);
  ASSERT_TRUE(fusion.ops[0].group && fusion.ops[1].group);
  EXPECT_EQ(*fusion.ops[0].group, *fusion.ops[1].group);
  EXPECT_FALSE(fusion.ops[2].group);  // the GEMM
  EXPECT_FALSE(fusion.ops[3].group);  // c: fusing it with a would need the GEMM inside the kernel
  EXPECT_TRUE(fusion.ops[0].launches);
  EXPECT_FALSE(fusion.ops[1].launches);
  EXPECT_TRUE(fusion.ops[3].launches);
  // t1 is read outside the group (by c): written; b reads it from registers.
  EXPECT_EQ(fusion.ops[0].written_saved, 0);
  EXPECT_EQ(fusion.ops[1].read_saved, kTensorBytes);
  // t2 feeds the GEMM: written.
  EXPECT_EQ(fusion.ops[1].written_saved, 0);
}

TEST(KernelFusion, RegionsOfModulePatternsDoNotFuseWithEachOther) {
  // Each m.N compiled on its own (torchtitan's per-block compile): a in m.0, b in m.1.
  const traces::Trace trace = chain_with_a_gemm_between("m.0.a", "m.1.b");
  EXPECT_EQ(fuse_like_inductor(trace, CompileScope{{"m.*"}}).groups, 0u);
  // The whole model compiled: they fuse.
  EXPECT_EQ(fuse_like_inductor(trace, CompileScope{}).groups, 1u);
  // Only m.1 compiled: a stays eager.
  const traces::Trace same = chain_with_a_gemm_between("m.0.a", "m.0.b");
  EXPECT_EQ(fuse_like_inductor(same, CompileScope{{"m.1"}}).groups, 0u);
  EXPECT_EQ(fuse_like_inductor(same, CompileScope{{"m.0"}}).groups, 1u);
}

TEST(KernelFusion, IntermediatesAndEagerTemporariesAreNeverWritten) {
  // x -> a -> t1 (+ a temporary nothing reads) -> b -> t2 -> lin: t1 lives only in the kernel.
  TraceBuilder b;
  const TensorIndex x = b.tensor("x", TensorRole::input);
  const TensorIndex w = b.tensor("w", TensorRole::weight);
  const TensorIndex t1 = b.tensor("t1");
  const TensorIndex scratch = b.tensor("a.float");
  const TensorIndex t2 = b.tensor("t2");
  const TensorIndex t3 = b.tensor("t3");
  b.op("a", OpKind::elementwise, {x}, {t1, scratch});
  b.op("b", OpKind::relu, {t1}, {t2});
  b.op("lin", OpKind::linear, {t2, w}, {t3});
  const traces::Trace trace = b.build();
  const KernelFusion fusion = fuse_like_inductor(trace, CompileScope{});
  EXPECT_EQ(fusion.ops[0].written_saved, 2 * kTensorBytes);  // t1 and the temporary
  EXPECT_EQ(fusion.ops[1].read_saved, kTensorBytes);
  EXPECT_EQ(fusion.ops[1].written_saved, 0);

  // The op-time model: a keeps its launch and moves only x; b has no launch and writes t2 only.
  const Platform platform = test_platform();
  OpTimeOptions eager_options;
  OpTimeOptions compiled_options;
  compiled_options.compile = CompileScope{};
  const std::vector<KernelRun> eager = OpTimeModel(platform, eager_options).run_all(trace);
  const std::vector<KernelRun> compiled = OpTimeModel(platform, compiled_options).run_all(trace);
  const double move = kTensorBytes / 1e12;  // one tensor at 1 TB/s
  // Each op's time: the slower of its arithmetic (4096 FLOP at 1 PFLOP/s) and its traffic, plus
  // its launch (kernel_power.hpp's run_kernel without power values).
  // Eager, a's temporary is read once more by the next kernel of its chain, which launches too
  // (op_time.cpp, add_eager_temporaries).
  EXPECT_NEAR(eager[0].seconds, 2 * 5e-6 + 4 * move, 1e-12);
  EXPECT_NEAR(compiled[0].seconds, 5e-6 + move, 1e-12);
  EXPECT_NEAR(eager[1].seconds, 5e-6 + 2 * move, 1e-12);
  EXPECT_NEAR(compiled[1].seconds, move, 1e-12);
  EXPECT_DOUBLE_EQ(compiled[2].seconds, eager[2].seconds);  // the GEMM is cuBLAS's either way
  // run() is the op alone, eager.
  EXPECT_DOUBLE_EQ(OpTimeModel(platform, compiled_options).run(trace, 1).seconds, eager[1].seconds);
}

// An eager RMSNorm compiled (its chain's fp32 copy and normalised rows are temporaries that
// Inductor's one kernel never writes) reads each 16 KiB row once: the layer-norm re-read through
// the caches (op_time.cpp, kLayerNormCachedRowBytes) is the native kernels', which write a mean
// and a reciprocal deviation beside one output of the input's size, not this chain's.
TEST(KernelFusion, ACompiledRmsNormChainReadsItsRowsOnce) {
  TraceBuilder b;
  const std::vector<std::int64_t> rows{4, 4096};  // fp32: 16 KiB a row
  const TensorIndex x = b.tensor("x", TensorRole::input, rows);
  const TensorIndex w = b.tensor("w", TensorRole::weight, {4096, 4096});
  const TensorIndex y = b.tensor("norm.out", TensorRole::temporary, rows);
  const TensorIndex copy = b.tensor("norm.float", TensorRole::temporary, rows);
  const TensorIndex normed = b.tensor("norm.normalized", TensorRole::temporary, rows);
  const TensorIndex rstd = b.tensor("norm.rstd", TensorRole::temporary, {4, 1});
  const TensorIndex out = b.tensor("lin.out", TensorRole::temporary, rows);
  b.op("norm", OpKind::layernorm, {x}, {y, copy, normed, rstd});
  b.op("lin", OpKind::linear, {y, w}, {out});
  const traces::Trace trace = b.build();
  const Platform platform = test_platform();
  OpTimeOptions compiled;
  compiled.compile = CompileScope{};
  const double row_tensor = 4 * 4096 * 4;
  // x read once and y written (the copy, the normalised rows and rstd, which nothing reads, stay
  // in the kernel).
  EXPECT_NEAR(OpTimeModel(platform, compiled).run_all(trace)[0].seconds, 5e-6 + 2 * row_tensor / 1e12, 1e-12);
}

}  // namespace
}  // namespace comptrain::models
