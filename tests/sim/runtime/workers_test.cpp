// The worker processes: a job's result, its errors, its stderr and its death come back to the
// parent as outcomes; a pool keeps going when one of its jobs dies.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <vector>

#include <unistd.h>

#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

TEST(Workers, AChildReturnsItsResultAndItsStderr) {
  ChildProcess child([] {
    std::fputs("a warning from the child\n", stderr);
    return std::string("the result");
  });
  const JobOutcome o = child.wait();
  EXPECT_EQ(o.status, JobOutcome::Status::result);
  EXPECT_EQ(o.text, "the result");
  EXPECT_EQ(o.diagnostics, "a warning from the child\n");
}

TEST(Workers, ErrorsComeBackAsTheirKind) {
  JobOutcome input = ChildProcess([]() -> std::string { throw InputError("s.yaml:3:4: bad"); }).wait();
  EXPECT_EQ(input.status, JobOutcome::Status::input_error);
  EXPECT_THROW(std::move(input).result_or_throw(), InputError);
  JobOutcome failed = ChildProcess([]() -> std::string { throw std::runtime_error("broken"); }).wait();
  EXPECT_EQ(failed.status, JobOutcome::Status::failed);
  EXPECT_EQ(failed.text, "broken");
  EXPECT_THROW(std::move(failed).result_or_throw(), std::runtime_error);
}

// A crash inside the child (SimGrid aborting, say) is reported with its signal and what the
// child wrote before it died.
TEST(Workers, ADeadChildIsReportedWithItsSignal) {
  const JobOutcome o = ChildProcess([]() -> std::string {
                         std::fputs("about to abort\n", stderr);
                         std::fflush(stderr);
                         std::abort();
                       }).wait();
  EXPECT_EQ(o.status, JobOutcome::Status::died);
  EXPECT_EQ(o.signal, SIGABRT);
  EXPECT_NE(o.text.find("signal 6"), std::string::npos) << o.text;
  EXPECT_EQ(o.diagnostics, "about to abort\n");
}

TEST(Workers, APoolRunsEveryJobAndSurvivesADeadOne) {
  WorkerPool pool(2);
  std::map<std::size_t, int> expected;
  for (int i = 0; i < 7; ++i) {
    const std::size_t id = pool.submit([i]() -> std::string {
      if (i == 3) std::abort();
      return std::to_string(i * i);
    });
    expected[id] = i;
  }
  std::size_t results = 0, deaths = 0;
  while (auto finished = pool.next()) {
    const int i = expected.at(finished->id);
    if (i == 3) {
      EXPECT_EQ(finished->outcome.status, JobOutcome::Status::died);
      ++deaths;
    } else {
      EXPECT_EQ(finished->outcome.text, std::to_string(i * i));
      ++results;
    }
    EXPECT_LE(pool.running(), 2u);
  }
  EXPECT_EQ(results, 6u);
  EXPECT_EQ(deaths, 1u);
}

TEST(Workers, LargeResultsAndStderrDoNotDeadlock) {
  // More than a pipe's buffer on both pipes at once: the parent must drain both.
  const JobOutcome o = ChildProcess([] {
                         const std::string noise(1 << 20, 'e');
                         std::fputs(noise.c_str(), stderr);
                         return std::string(4 << 20, 'r');
                       }).wait();
  EXPECT_EQ(o.status, JobOutcome::Status::result);
  EXPECT_EQ(o.text.size(), std::size_t{4} << 20);
  EXPECT_FALSE(o.diagnostics.empty());  // kept to its last part
}

TEST(Workers, PrefixLines) {
  EXPECT_EQ(prefix_lines("v1: ", "a\nb\n"), "v1: a\nv1: b\n");
  EXPECT_EQ(prefix_lines("v1: ", "a"), "v1: a\n");
}

// run_jobs hands the outcomes back in job order whatever order the workers finish in, so the
// failure a study reports (the first in that order) does not depend on -j: here the later job
// fails first, and the earlier one is still the first failure.
TEST(Workers, RunJobsKeepsJobOrderAndTheFirstFailureIsTheLowestNumbered) {
  std::vector<ChildProcess::Work> works;
  works.emplace_back([]() -> std::string { return "zero"; });
  works.emplace_back([]() -> std::string {
    ::usleep(300'000);
    throw std::runtime_error("one failed, late");
  });
  works.emplace_back([]() -> std::string { throw std::runtime_error("two failed, early"); });
  std::vector<std::size_t> finished;
  const std::vector<JobOutcome> outcomes = run_jobs(std::move(works), 3, [&](std::size_t index, const JobOutcome&) { finished.push_back(index); });
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].text, "zero");
  EXPECT_EQ(outcomes[1].text, "one failed, late");
  EXPECT_EQ(outcomes[2].text, "two failed, early");
  EXPECT_EQ(finished.size(), 3u);
  EXPECT_EQ(finished.back(), 1u);  // the slow one ended last
  const JobOutcome* first = first_failure(outcomes);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->text, "one failed, late");
  EXPECT_EQ(first_failure(std::vector<JobOutcome>(2)), nullptr);  // all results
}

}  // namespace
}  // namespace comptrain::sim
