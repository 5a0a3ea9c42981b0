// Input and output files (pd2bw/schemas/files.hpp): inputs are regular files under a size cap (a FIFO,
// a directory or /dev/zero is refused at once, naming the file); outputs replace regular files (keeping
// their mode), follow links (the link stays) and are written in place when the path is not a regular
// file; check_output_path refuses what could not be written.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"
#include "temp_dir.hpp"

namespace s = pd2bw::schemas;
namespace fs = std::filesystem;
using pd2bw::test::read_bytes;
using pd2bw::test::TempDir;
using pd2bw::test::write_bytes;

namespace {

// The message of the UsageError `f` throws ("" when it throws none).
template <typename F>
std::string usage_message(F f) {
  try {
    f();
  } catch (const pd2bw::UsageError& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("read_input_file takes regular files up to the cap and names the file otherwise") {
  const TempDir tmp("files-in");
  write_bytes(tmp.file("a.json"), std::string(100, 'x'));
  CHECK(s::read_input_file(tmp.file("a.json"), "profile", 100) == std::string(100, 'x'));
  const std::string big = usage_message([&] { (void)s::read_input_file(tmp.file("a.json"), "profile", 99); });
  CHECK(contains(big, "cannot read profile \"" + tmp.file("a.json") + "\": it is larger than the 99 B"));
  CHECK(contains(usage_message([&] { (void)s::read_input_file(tmp.path().string(), "plan", 100); }),
                 "it is a directory, not a regular file"));
  REQUIRE(::mkfifo(tmp.file("fifo").c_str(), 0600) == 0);  // nobody writes it: a blocking open would hang
  CHECK(contains(usage_message([&] { (void)s::read_input_file(tmp.file("fifo"), "cluster", 100); }),
                 "cannot read cluster \"" + tmp.file("fifo") + "\": it is a FIFO (named pipe), not a regular file"));
  CHECK(contains(usage_message([] { (void)s::read_input_file("/dev/zero", "training data", 100); }),
                 "\"/dev/zero\": it is a character device"));
  CHECK(contains(usage_message([&] { (void)s::read_input_file(tmp.file("none"), "plan", 100); }),
                 "No such file or directory"));
}

TEST_CASE("write_output_file replaces regular files, follows links and keeps permissions") {
  const TempDir tmp("files-out");
  write_bytes(tmp.file("real"), "old");
  ::chmod(tmp.file("real").c_str(), 0640);
  fs::create_symlink("real", tmp.path() / "link");
  s::write_output_file(tmp.file("link"), {"new", "!"});
  CHECK(fs::is_symlink(tmp.path() / "link"));
  CHECK(read_bytes(tmp.file("real")) == "new!");
  CHECK((fs::status(tmp.path() / "real").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  fs::create_symlink("sub/target", tmp.path() / "dangling");
  fs::create_directory(tmp.path() / "sub");
  s::write_output_file(tmp.file("dangling"), {"made"});
  CHECK(fs::is_symlink(tmp.path() / "dangling"));
  CHECK(read_bytes(tmp.file("sub/target")) == "made");
  CHECK_THROWS_AS(s::write_output_file(tmp.file("sub"), {"x"}), pd2bw::UsageError);
  CHECK(fs::is_directory(tmp.path() / "sub"));
  fs::create_symlink("loop2", tmp.path() / "loop1");
  fs::create_symlink("loop1", tmp.path() / "loop2");
  CHECK(contains(usage_message([&] { s::write_output_file(tmp.file("loop1"), {"x"}); }), "too many levels"));
  int temporaries = 0;
  for (const auto& e : fs::recursive_directory_iterator(tmp.path()))
    temporaries += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(temporaries == 0);
}

TEST_CASE("check_output_path refuses directories, missing directories and files used as directories") {
  const TempDir tmp("files-check");
  s::check_output_path(tmp.file("new.json"), "-o");  // a new file in a writable directory
  s::check_output_path("-", "-o");
  CHECK(contains(usage_message([&] { s::check_output_path(tmp.path().string(), "--trace"); }),
                 "--trace \"" + tmp.path().string() + "\" cannot be written: it is a directory"));
  CHECK(contains(usage_message([&] { s::check_output_path(tmp.file("no/such.json"), "-o"); }), "does not exist"));
  write_bytes(tmp.file("f"), "x");
  CHECK(contains(usage_message([&] { s::check_output_path(tmp.file("f/x.json"), "-o"); }), "is not a directory"));
  CHECK(contains(usage_message([] { s::check_output_path("", "--json"); }), "the path is empty"));
  int left = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) left += e.path().filename().string() != "f";
  CHECK(left == 0);  // the probe is removed
}

// Issue 28: a file pd2bw creates or truncates is never written through a link planted where it writes.
TEST_CASE("open_for_writing refuses links, hard links and FIFOs and changes nothing") {
  const TempDir tmp("files-nofollow");
  write_bytes(tmp.file("victim"), "precious");
  fs::create_symlink(tmp.file("victim"), tmp.path() / "link");
  fs::create_symlink(tmp.file("gone"), tmp.path() / "dangling");
  fs::create_hard_link(tmp.file("victim"), tmp.path() / "hard");
  REQUIRE(::mkfifo(tmp.file("fifo").c_str(), 0600) == 0);
  for (const auto how : {s::WriteOpen::create_new, s::WriteOpen::create_or_open, s::WriteOpen::truncate,
                         s::WriteOpen::existing}) {
    const s::WriteFd link = s::open_for_writing(tmp.file("link"), how, 0644);
    CHECK(link.fd < 0);
    CHECK(contains(link.why, "symbolic link"));
    const s::WriteFd dangling = s::open_for_writing(tmp.file("dangling"), how, 0644);
    CHECK(dangling.fd < 0);
    const s::WriteFd hard = s::open_for_writing(tmp.file("hard"), how, 0644);
    CHECK(hard.fd < 0);
    const s::WriteFd fifo = s::open_for_writing(tmp.file("fifo"), how, 0644);  // must not block
    CHECK(fifo.fd < 0);
  }
  CHECK(read_bytes(tmp.file("victim")) == "precious");
  CHECK(!fs::exists(tmp.path() / "gone"));
  const s::WriteFd fresh = s::open_for_writing(tmp.file("new"), s::WriteOpen::create_new, 0644);
  REQUIRE(fresh.fd >= 0);
  ::close(fresh.fd);
  write_bytes(tmp.file("old"), "12345");
  const s::WriteFd cut = s::open_for_writing(tmp.file("old"), s::WriteOpen::truncate, 0644);
  REQUIRE(cut.fd >= 0);
  ::close(cut.fd);
  CHECK(read_bytes(tmp.file("old")).empty());
}

TEST_CASE("write_file_atomic does not write through a link planted at its temporary's name") {
  const TempDir tmp("files-tmp-link");
  write_bytes(tmp.file("victim"), "precious");
  const std::string out = tmp.file("out.json");
  fs::create_symlink(tmp.file("victim"), out + ".tmp." + std::to_string(::getpid()));
  s::write_file_atomic(out, {"new"});
  CHECK(read_bytes(out) == "new");
  CHECK(read_bytes(tmp.file("victim")) == "precious");
  CHECK(!fs::is_symlink(out));
}
