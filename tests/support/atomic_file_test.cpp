#include "comptrain/support/atomic_file.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "common/input_error_of.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test_support::input_error_of;

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

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
  EXPECT_THAT(input_error_of([&] { read_file(dir_ / "missing"); }), HasSubstr("missing': No such file or directory"));
  EXPECT_THAT(input_error_of([&] { read_file(dir_); }), HasSubstr("': it is a directory; expected a regular file"));
}

// A FIFO would block the reader until a writer came, /dev/zero never ends (it read until memory
// ran out: shared/defects-2/12); both are refused before any byte is read, links to them too.
TEST_F(AtomicFile, ReadingRefusesAFifoAndADeviceWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir_ / "in.fifo").c_str(), 0600), 0);
  EXPECT_THAT(input_error_of([&] { read_file(dir_ / "in.fifo"); }), HasSubstr("in.fifo': it is a FIFO; expected a regular file"));
  EXPECT_THAT(input_error_of([&] { read_file("/dev/zero"); }), HasSubstr("cannot read '/dev/zero': it is a character device; expected a regular file"));
  fs::create_symlink("/dev/zero", dir_ / "zero.yaml");
  EXPECT_THAT(input_error_of([&] { read_file(dir_ / "zero.yaml"); }), HasSubstr("zero.yaml': it is a character device"));
  write_file_atomically(dir_ / "real.json", "{}");
  fs::create_symlink("real.json", dir_ / "link.json");
  EXPECT_EQ(read_file(dir_ / "link.json"), "{}") << "a link to a regular file is read";
}

TEST_F(AtomicFile, ReadingIsBoundedInSize) {
  write_file_atomically(dir_ / "k.txt", std::string(1024, 'k'));
  EXPECT_EQ(read_file(dir_ / "k.txt", 1024).size(), 1024u) << "the bound is inclusive";
  EXPECT_THAT(input_error_of([&] { read_file(dir_ / "k.txt", 1023); }), HasSubstr("k.txt': it is larger than 1023 bytes"));
  // The default bound, on a sparse file (no disk used): refused from its size, nothing read.
  const fs::path huge = dir_ / "huge.json";
  write_file_atomically(huge, "");
  ASSERT_EQ(::truncate(huge.c_str(), kMaxInputFileBytes + 1), 0);
  EXPECT_THAT(input_error_of([&] { read_file(huge); }),
              HasSubstr("huge.json': it is larger than 1 GiB (1073741824 bytes), the most comptrain reads from one input file"));
  // /proc's files are regular and say they are empty: read to their end all the same.
  EXPECT_THAT(read_file("/proc/self/status"), HasSubstr("Pid:"));
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

TEST_F(AtomicFile, AReplacedFileKeepsItsPermissions) {
  write_file_atomically(dir_ / "out.json", "first");
  ASSERT_EQ(::chmod((dir_ / "out.json").c_str(), 0640), 0);
  write_file_atomically(dir_ / "out.json", "second");
  EXPECT_EQ(mode_of(dir_ / "out.json") & 0777, 0640u);
}

// A symbolic link is followed, never replaced: its target is written atomically in the
// target's own directory (the link's directory may be elsewhere), a dangling link creates it.
TEST_F(AtomicFile, ASymbolicLinkIsFollowedAndKept) {
  fs::create_directories(dir_ / "sub");
  write_file_atomically(dir_ / "sub" / "target.json", "old");
  fs::create_symlink("sub/target.json", dir_ / "link");
  write_file_atomically(dir_ / "link", "new");
  EXPECT_TRUE(S_ISLNK(mode_of(dir_ / "link")));
  EXPECT_EQ(read_file(dir_ / "sub" / "target.json"), "new");

  fs::create_symlink("sub/created.json", dir_ / "dangling");
  fs::create_symlink("dangling", dir_ / "chain");
  write_file_atomically(dir_ / "chain", "made");
  EXPECT_TRUE(S_ISLNK(mode_of(dir_ / "chain")));
  EXPECT_TRUE(S_ISLNK(mode_of(dir_ / "dangling")));
  EXPECT_EQ(read_file(dir_ / "sub" / "created.json"), "made");
  EXPECT_EQ(entries(), 4u) << "sub, link, dangling, chain: no temporary";
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "sub"), fs::directory_iterator()), 2);

  fs::create_symlink("loop-b", dir_ / "loop-a");
  fs::create_symlink("loop-a", dir_ / "loop-b");
  EXPECT_THAT(input_error_of([&] { write_file_atomically(dir_ / "loop-a", "x"); }), HasSubstr("more than 40 symbolic links in a row"));
}

// A FIFO is opened and written in place: its reader gets the contents, and it stays a FIFO
// (it was renamed over by a regular file: shared/defects-2/01).
TEST_F(AtomicFile, AFifoIsWrittenInPlace) {
  const fs::path fifo = dir_ / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    const int fd = ::open(fifo.c_str(), O_RDONLY);
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) received.append(buffer, static_cast<std::size_t>(n));
    ::close(fd);
  });
  const std::string contents(100000, 'f');  // more than a pipe's buffer
  write_file_atomically(fifo, contents);
  reader.join();
  EXPECT_EQ(received, contents);
  EXPECT_TRUE(S_ISFIFO(mode_of(fifo)));
  EXPECT_EQ(entries(), 1u);
}

// /dev/null is written in place; run as root, the rename replaced the device node itself.
TEST_F(AtomicFile, ACharacterDeviceStaysADevice) {
  write_file_atomically("/dev/null", "discarded");
  EXPECT_TRUE(S_ISCHR(mode_of("/dev/null")));
  fs::create_symlink("/dev/null", dir_ / "null-link");
  write_file_atomically(dir_ / "null-link", "discarded");
  EXPECT_TRUE(S_ISCHR(mode_of("/dev/null")));
  EXPECT_TRUE(S_ISLNK(mode_of(dir_ / "null-link")));
}

// /dev/fd/N (bash's process substitution `-o >(gzip > t.gz)`) and /proc/self/fd/N are this
// process's own descriptors: written through them, not replaced (mkstemp in /dev/fd failed).
TEST_F(AtomicFile, AnOpenDescriptorIsWrittenThrough) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  write_file_atomically("/dev/fd/" + std::to_string(ends[1]), "through /dev/fd, ");
  write_file_atomically("/proc/self/fd/" + std::to_string(ends[1]), "through /proc");
  ::close(ends[1]);
  std::string received;
  char buffer[256];
  for (ssize_t n; (n = ::read(ends[0], buffer, sizeof buffer)) > 0;) received.append(buffer, static_cast<std::size_t>(n));
  ::close(ends[0]);
  EXPECT_EQ(received, "through /dev/fd, through /proc");
  EXPECT_THAT(input_error_of([] { write_file_atomically("/dev/fd/999999", "x"); }), HasSubstr("file descriptor 999999 is not open"));
}

TEST_F(AtomicFile, ADirectoryIsRefusedAsAnOutput) {
  EXPECT_THAT(input_error_of([&] { write_file_atomically(dir_, "x"); }), HasSubstr("': it is a directory; expected a regular file"));
  EXPECT_THAT(input_error_of([&] { write_file_atomically(dir_.string() + "/", "x"); }), HasSubstr("/': expected a file name, not a directory"));
  EXPECT_THAT(input_error_of([] { write_file_atomically("", "x"); }), HasSubstr("'': expected a file name"));
  EXPECT_EQ(entries(), 0u);
}

// Standard output that cannot be written is an error, not a silent success (shared/defects-2/15):
// in a child, whose standard output is /dev/full (writing to it fails with ENOSPC) or /dev/null.
TEST_F(AtomicFile, StandardOutputFailuresAreReported) {
  for (const char* device : {"/dev/full", "/dev/null"}) {
    std::fflush(stdout);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const int fd = ::open(device, O_WRONLY);
      if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0) ::_exit(5);
      std::cout << "a report\n";
      std::printf("and a line through stdio\n");
      try {
        check_standard_output();
        ::_exit(0);
      } catch (const InputError& e) {
        ::_exit(std::string(e.what()) == "cannot write to standard output: No space left on device" ? 3 : 4);
      }
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), std::string(device) == "/dev/full" ? 3 : 0) << device;
  }
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
