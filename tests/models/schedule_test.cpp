// The schedule IR: validation and the static (sequential) peak, on hand-built schedules.

#include "comptrain/models/schedule.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>

namespace comptrain::models {
namespace {

using ::testing::HasSubstr;

Buffer buffer(std::string name, std::int64_t bytes, bool resident = false, bool held = false) {
  Buffer b;
  b.name = std::move(name);
  b.bytes = bytes;
  b.resident = resident;
  b.held_to_end = held;
  return b;
}

Task task(std::string name, Stream stream, std::vector<BufferId> creates, std::vector<BufferId> uses,
          std::vector<TaskId> after = {}) {
  Task t;
  t.name = std::move(name);
  t.stream = stream;
  t.kind = stream == Stream::compute ? TaskKind::op : TaskKind::offload;
  if (stream == Stream::compute) t.op = 0;
  t.creates = std::move(creates);
  t.uses = std::move(uses);
  t.after = std::move(after);
  return t;
}

// weights 1000 (resident); a 100 created by t0, used by t1; b 10 created by t1, used by t2;
// g 1 created by t2 and held to the end.
Schedule small() {
  Schedule s;
  s.strategy = "test";
  s.buffers = {buffer("w", 1000, true), buffer("a", 100), buffer("b", 10), buffer("g", 1, false, true)};
  s.tasks = {task("t0", Stream::compute, {1}, {0}), task("t1", Stream::compute, {2}, {1}),
             task("t2", Stream::compute, {3}, {2}), task("t3", Stream::compute, {}, {0})};
  return s;
}

TEST(ScheduleStrings, NamesEveryValue) {
  EXPECT_EQ(to_string(Stream::codec), "codec");
  EXPECT_EQ(to_string(Stream::h2d), "h2d");
  EXPECT_EQ(to_string(MemoryRole::prefetch), "prefetch");
  EXPECT_EQ(to_string(MemoryRole::optimizer_state), "optimizer_state");
  EXPECT_EQ(to_string(TaskKind::decompress), "decompress");
  EXPECT_EQ(to_string(TaskKind::recompute), "recompute");
  EXPECT_EQ(to_string(TaskKind::send), "send");
  EXPECT_EQ(to_string(TaskKind::recv), "recv");
  EXPECT_EQ(to_string(Stream::p2p), "p2p");
  EXPECT_EQ(memory_role_of(traces::TensorRole::activation), MemoryRole::activation);
  EXPECT_EQ(memory_role_of(traces::TensorRole::temporary), MemoryRole::temporary);
  EXPECT_EQ(memory_role_of(traces::TensorRole::gradient), MemoryRole::gradient);
  EXPECT_EQ(memory_role_of(traces::TensorRole::input), MemoryRole::input);
}

TEST(SequentialPeak, CountsFromFirstCreatorToLastUser) {
  const Schedule s = small();
  s.validate();
  // t0: 1000 + 100; t1: + 10 = 1110; t2: a freed, 1000 + 10 + 1 = 1011; t3: 1001.
  EXPECT_EQ(sequential_peak_bytes(s), 1110);
  Schedule held = s;
  held.buffers[1].held_to_end = true;
  EXPECT_EQ(sequential_peak_bytes(held), 1111);
}

TEST(SequentialPeak, EmptyScheduleIsResidentOnly) {
  Schedule s;
  s.buffers = {buffer("w", 7, true), buffer("never", 50)};
  s.validate();
  EXPECT_EQ(sequential_peak_bytes(s), 7);
}

TEST(SequentialPeak, CopyFreesTheOriginalWhenItEnds) {
  // a is created by t0 and used by an offload on d2h; t2 runs after the offload: a is gone.
  Schedule s;
  s.buffers = {buffer("a", 100), buffer("x", 5)};
  s.tasks = {task("t0", Stream::compute, {0}, {}), task("off", Stream::d2h, {}, {0}, {0}),
             task("t2", Stream::compute, {1}, {})};
  s.validate();
  EXPECT_EQ(sequential_peak_bytes(s), 100);
}

TEST(Validate, RejectsOutOfRangeReferences) {
  Schedule s = small();
  s.tasks[1].uses.push_back(9);
  EXPECT_THROW(s.validate(), std::logic_error);
  s = small();
  s.tasks[1].creates.push_back(4);
  EXPECT_THROW(s.validate(), std::logic_error);
  s = small();
  s.tasks[1].after.push_back(4);
  EXPECT_THROW(s.validate(), std::logic_error);
}

TEST(Validate, RejectsStreamOrderContradictingAnAfterEdge) {
  Schedule s = small();
  s.tasks[0].after.push_back(2);  // t0 waits for t2, which the compute stream runs after t0
  EXPECT_THROW(s.validate(), std::logic_error);
}

TEST(Validate, RejectsCyclesAcrossStreams) {
  Schedule s;
  s.buffers = {buffer("a", 1)};
  s.tasks = {task("c", Stream::compute, {0}, {}, {1}), task("d", Stream::d2h, {}, {0}, {0})};
  EXPECT_THROW(s.validate(), std::logic_error);
  s.tasks[0].after.clear();
  EXPECT_NO_THROW(s.validate());
  s.tasks[1].after = {1};  // waits for itself
  EXPECT_THROW(s.validate(), std::logic_error);
}

TEST(Validate, RejectsUseBeforeCreation) {
  // The copy on d2h does not wait for the task that creates its buffer.
  Schedule s;
  s.buffers = {buffer("a", 1)};
  s.tasks = {task("c", Stream::compute, {0}, {}), task("d", Stream::d2h, {}, {0})};
  EXPECT_THROW(s.validate(), std::logic_error);
  s.tasks[1].after = {0};
  EXPECT_NO_THROW(s.validate());
  // Never created at all.
  s.tasks[0].creates.clear();
  EXPECT_THROW(s.validate(), std::logic_error);
  // A resident buffer needs no creator but may not have one either.
  s.buffers[0].resident = true;
  EXPECT_NO_THROW(s.validate());
  s.tasks[0].creates = {0};
  EXPECT_THROW(s.validate(), std::logic_error);
}

TEST(Validate, TransitiveWaitsCountAsOrdered) {
  // a created on compute; h2d waits for d2h which waits for the creator.
  Schedule s;
  s.buffers = {buffer("a", 1)};
  s.tasks = {task("c", Stream::compute, {0}, {}), task("d", Stream::d2h, {}, {}, {0}),
             task("h", Stream::h2d, {}, {0}, {1})};
  s.tasks[2].kind = TaskKind::prefetch;
  EXPECT_NO_THROW(s.validate());
}

TEST(Validate, RejectsBadDurationsAndMissingOps) {
  Schedule s = small();
  s.tasks[0].seconds = -1;
  EXPECT_THROW(s.validate(), std::logic_error);
  s = small();
  s.tasks[0].op.reset();
  EXPECT_THROW(s.validate(), std::logic_error);
  s = small();
  s.buffers[0].bytes = -5;
  EXPECT_THROW(s.validate(), std::logic_error);
}

// A send or recv runs on the p2p stream and names its message; nothing else does either.
TEST(Validate, PipelineTransfersNeedTheP2pStreamAndAMessage) {
  auto with_recv = [] {
    Schedule s = small();
    s.buffers.push_back(buffer("received", 64));
    Task recv;
    recv.name = "recv";
    recv.kind = TaskKind::recv;
    recv.stream = Stream::p2p;
    recv.bytes = 64;
    recv.message = PipelineMessage{.peer = 1, .gradient = false, .micro_batch = 2, .chunk = 0};
    recv.creates = {s.buffers.size() - 1};
    s.tasks.insert(s.tasks.begin(), recv);
    // The first op (now task 1) reads what was received, once it has arrived.
    for (Task& t : s.tasks) {
      for (TaskId& a : t.after) ++a;
    }
    s.tasks[1].uses.push_back(s.buffers.size() - 1);
    s.tasks[1].after.push_back(0);
    return s;
  };
  EXPECT_NO_THROW(with_recv().validate());
  auto error_of = [](const Schedule& s) -> std::string {
    try {
      s.validate();
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "valid";
  };
  Schedule s = with_recv();
  s.tasks[0].stream = Stream::comm;
  EXPECT_THAT(error_of(s), HasSubstr("is a send or recv off the p2p stream"));
  s = with_recv();
  s.tasks[0].message.reset();
  EXPECT_THAT(error_of(s), HasSubstr("names no message"));
  s = with_recv();
  s.tasks[0].message->peer = -1;
  EXPECT_THAT(error_of(s), HasSubstr("negative peer"));
  s = with_recv();
  s.tasks[1].message = s.tasks[0].message;  // an op naming a message
  EXPECT_THAT(error_of(s), HasSubstr("names a pipeline message but is not a send or recv"));
  s = with_recv();
  s.tasks[1].stream = Stream::p2p;  // an op on the p2p stream
  EXPECT_THAT(error_of(s), HasSubstr("is on the p2p stream but is not a send or recv"));
}

}  // namespace
}  // namespace comptrain::models
