// Tests of pd2bw_schemas' helpers: byte sizes as people write them and for humans, SHA-256 against
// the FIPS 180-4 vectors, atomic file writes and reads, and the version stamp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "schema_test_util.hpp"
#include "temp_dir.hpp"

namespace s = pd2bw::schemas;
using pd2bw::testing::check_prefix;

TEST_CASE("parse_bytes reads sizes as people write them") {
  CHECK(s::parse_bytes("16GiB", "--memory") == 17179869184);
  CHECK(s::parse_bytes("1.5GB", "--memory") == 1500000000);
  CHECK(s::parse_bytes("512 MiB", "--memory") == 536870912);
  CHECK(s::parse_bytes("4096", "--memory") == 4096);
  CHECK(s::parse_bytes(" 7 b ", "x") == 7);
  CHECK(s::parse_bytes("2k", "x") == 2000);
  CHECK(s::parse_bytes("1kib", "x") == 1024);
  CHECK(s::parse_bytes("0", "x") == 0);
  CHECK(s::parse_bytes("1TB", "x") == 1000000000000);
  CHECK(s::parse_bytes("9223372036854775807", "x") == INT64_MAX);
  for (const char* bad : {"-1GiB", "12XB", "", "GiB", "1.2.3", "1 GiBs", "99999999999999999999", "9000000 TiB",
                          "1e3"}) {
    INFO("input: " << bad);
    CHECK_THROWS_AS((void)s::parse_bytes(bad, "--memory"), pd2bw::UsageError);
  }
  try {
    (void)s::parse_bytes("12XB", "--memory");
  } catch (const pd2bw::UsageError& e) {
    check_prefix(e.what(), "--memory: ");
    CHECK(!e.hint().empty());
  }
}

TEST_CASE("format_bytes prints sizes for humans") {
  CHECK(s::format_bytes(100) == "100 B");
  CHECK(s::format_bytes(12 * 1024) == "12 KiB");
  CHECK(s::format_bytes(640 * 1024 * 1024) == "640 MiB");
  CHECK(s::format_bytes(static_cast<int64_t>(15.2 * 1024 * 1024 * 1024)) == "15.2 GiB");
  CHECK(s::format_bytes(int64_t{16} << 30) == "16 GiB");
  CHECK(s::format_bytes((int64_t{1} << 30) - 1) == "1.0 GiB");
  CHECK(s::format_bytes(-2048) == "-2 KiB");
}

TEST_CASE("sha256 matches the FIPS 180-4 examples") {
  CHECK(s::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(s::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(s::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(s::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(s::sha256_hex(std::string(55, 'x')).size() == 64);  // padding fits one block exactly
  CHECK(s::sha256_hex(std::string(64, 'x')) != s::sha256_hex(std::string(63, 'x')));
}

TEST_CASE("files are written atomically and read back") {
  const auto dir = std::filesystem::temp_directory_path() / "pd2bw_test_schemas";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.json").string();
  s::write_text_file(path, "first\n");
  s::write_text_file(path, "second\n");
  CHECK(s::read_text_file(path) == "second\n");
  int leftovers = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) leftovers += e.path().filename() != "out.json";
  CHECK(leftovers == 0);
  CHECK_THROWS_AS(s::read_text_file(dir.string()), pd2bw::UsageError);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(s::read_text_file((dir / "missing.json").string()), pd2bw::UsageError);
  CHECK_THROWS_AS(s::write_text_file((dir / "no" / "such" / "dir.json").string(), "x"), pd2bw::Error);
}

TEST_CASE("write_file_atomic joins the pieces, replaces the target and cleans up after a failure") {
  const pd2bw::test::TempDir tmp("atomic");
  const std::filesystem::path& dir = tmp.path();
  const std::string path = (dir / "t.bin").string();
  s::write_file_atomic(path, {"ab", "", std::string_view("c\0d", 3)});
  CHECK(s::read_text_file(path) == std::string("abc\0d", 5));
  s::write_file_atomic(path, {"new"});
  CHECK(s::read_text_file(path) == "new");
  s::write_file_atomic(path, {});
  CHECK(s::read_text_file(path).empty());
  // The target is a directory: the rename fails, the directory stays and no temporary is left.
  std::filesystem::create_directories(dir / "sub");
  CHECK_THROWS_AS(s::write_file_atomic((dir / "sub").string(), {"x"}), pd2bw::Error);
  CHECK(std::filesystem::is_directory(dir / "sub"));
  // A missing directory is the user's to fix.
  CHECK_THROWS_AS(s::write_file_atomic((dir / "missing" / "t.bin").string(), {"x"}), pd2bw::UsageError);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"sub", "t.bin"});
  // A bare file name lands in the working directory (whose directory entry is the one synced).
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  s::write_file_atomic("bare.txt", {"here"});
  std::filesystem::current_path(cwd);
  CHECK(s::read_text_file((dir / "bare.txt").string()) == "here");
}

TEST_CASE("version stamp") {
  CHECK(!s::pd2bw_version().empty());
  CHECK(!s::pd2bw_git_sha().empty());
}