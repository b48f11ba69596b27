#include "comptrain/support/atomic_file.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "comptrain/support/input_error.hpp"

namespace comptrain {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("comptrain_atomic_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::size_t entries() const { return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }
  fs::path dir_;
};

TEST_F(AtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
  write_file_atomically(dir_ / "out.json", "first");
  EXPECT_EQ(read_file(dir_ / "out.json"), "first");
  write_file_atomically(dir_ / "out.json", "second, longer");
  EXPECT_EQ(read_file(dir_ / "out.json"), "second, longer");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFile, AMissingDirectoryIsAnInputErrorNamingThePath) {
  try {
    write_file_atomically(dir_ / "no" / "such" / "out.json", "x");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("out.json"), std::string::npos);
  }
}

TEST_F(AtomicFile, ReadingAMissingFileOrADirectoryIsAnInputError) {
  EXPECT_THROW(read_file(dir_ / "missing"), InputError);
  EXPECT_THROW(read_file(dir_), InputError);
}

// "-" is standard output for every output option (write_output); other paths are files
// written atomically, so a file literally named "-" needs "./-".
TEST_F(AtomicFile, WriteOutputSendsDashToStandardOutputAndAnythingElseToAFile) {
  ::testing::internal::CaptureStdout();
  write_output("-", std::string_view("to stdout\0binary", 16));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), std::string("to stdout\0binary", 16));
  EXPECT_EQ(entries(), 0u);

  ::testing::internal::CaptureStdout();
  write_output((dir_ / "out.txt").string(), "to a file");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(read_file(dir_ / "out.txt"), "to a file");
  EXPECT_THROW(write_output((dir_ / "missing" / "out.txt").string(), "x"), InputError);

  EXPECT_TRUE(is_standard_output("-"));
  EXPECT_FALSE(is_standard_output("./-"));
  EXPECT_FALSE(is_standard_output(""));
}

TEST_F(AtomicFile, AnInterruptedWriteLeavesTheOldFileAndNoTemporary) {
  write_file_atomically(dir_ / "out.json", "old");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Writing 1 GiB takes long enough for the parent's SIGTERM to land mid-write.
    std::string big(std::size_t{1} << 30, 'x');
    write_file_atomically(dir_ / "out.json", big);
    ::_exit(0);
  }
  // Wait until the child's temporary file exists, then interrupt it.
  for (int i = 0; i < 2000 && entries() < 2; ++i) ::usleep(1000);
  ::kill(child, SIGTERM);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFEXITED(status)) GTEST_SKIP() << "the write finished before the signal arrived";
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(read_file(dir_ / "out.json"), "old");
  EXPECT_EQ(entries(), 1u) << "the temporary file was left behind";
}

}  // namespace
}  // namespace comptrain
