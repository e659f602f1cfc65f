// fsdp::remove_tree and fsdp::regular_files_under: the tree walks that
// replace std::filesystem's ([Note: no std::filesystem tree walks beside a
// torch wheel] in fsdp/file_tree.h).

#include "fsdp/file_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/temp_dir.h"

namespace fs = std::filesystem;
using fsdp::testing::TempDir;

namespace {

void write_file(const std::string& path, const std::string& text = "bytes") {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  ASSERT_TRUE(fs::is_regular_file(path)) << path;
}

// root/a/b/c/deep.txt, root/a/one.txt, root/empty/, root/top.txt, a link to
// a file and a link to a directory that both lie outside the tree, and a
// dangling link.
struct Tree {
  explicit Tree(const TempDir& tmp) : root(tmp / "root"), outside(tmp / "outside") {
    write_file(root + "/a/b/c/deep.txt");
    write_file(root + "/a/one.txt");
    write_file(root + "/top.txt");
    fs::create_directories(root + "/empty");
    write_file(outside + "/kept.txt");
    fs::create_symlink(outside + "/kept.txt", root + "/a/link-to-file");
    fs::create_directory_symlink(outside, root + "/a/b/link-to-dir");
    fs::create_symlink(root + "/nothing-here", root + "/dangling");
  }
  std::string root;
  std::string outside;
};

TEST(FileTree, RemoveTreeRemovesEverythingAndFollowsNoLink) {
  TempDir tmp;
  const Tree tree(tmp);
  EXPECT_EQ(fsdp::remove_tree(tree.root), "");
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree.root)));
  // What the links pointed at is outside the tree, and stays.
  EXPECT_TRUE(fs::is_regular_file(tree.outside + "/kept.txt"));
}

TEST(FileTree, RemoveTreeTakesAFileALinkOrNothing) {
  TempDir tmp;
  write_file(tmp / "file");
  EXPECT_EQ(fsdp::remove_tree(tmp / "file"), "");
  EXPECT_FALSE(fs::exists(tmp / "file"));

  fs::create_directories(tmp / "target");
  fs::create_directory_symlink(tmp / "target", tmp / "link");
  EXPECT_EQ(fsdp::remove_tree(tmp / "link"), "");
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp / "link")));
  EXPECT_TRUE(fs::is_directory(tmp / "target"));

  EXPECT_EQ(fsdp::remove_tree(tmp / "never-made"), "");
}

TEST(FileTree, RemoveTreeSaysWhatItCouldNotRemove) {
  TempDir tmp;
  write_file(tmp / "file");
  const std::string error = fsdp::remove_tree(tmp / "file/below");
  EXPECT_NE(error.find(tmp / "file/below"), std::string::npos) << error;
  EXPECT_NE(error.find("Not a directory"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_regular_file(tmp / "file"));
}

TEST(FileTree, RegularFilesUnderListsEveryDepthSortedAndSkipsLinks) {
  TempDir tmp;
  const Tree tree(tmp);
  const std::vector<std::string> expected = {tree.root + "/a/b/c/deep.txt",
                                             tree.root + "/a/one.txt", tree.root + "/top.txt"};
  EXPECT_EQ(fsdp::regular_files_under(tree.root), expected);
}

TEST(FileTree, RegularFilesUnderNamesAMissingDirectory) {
  TempDir tmp;
  try {
    fsdp::regular_files_under(tmp / "missing");
    FAIL() << "a missing directory was listed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp / "missing"), std::string::npos) << e.what();
  }
}

}  // namespace
