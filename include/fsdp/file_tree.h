#pragma once
// Removing and listing a directory tree without std::filesystem's tree walks.
//
// [Note: no std::filesystem tree walks beside a torch wheel]
// The torch wheels (and the LibTorch zips) link parts of their toolchain's
// libstdc++ in statically, and libtorch_cpu.so exports some of them: the
// functions of std::filesystem::recursive_directory_iterator
// (pytorch/pytorch#133437; later wheels mark them weak, which the dynamic
// linker binds all the same). A program that links LibTorch then runs that
// class's exported functions from the wheel's build and the rest of
// std::filesystem from the system's libstdc++, and remove_all mixes the
// two: it constructs and destroys its iterator through the PLT and advances
// it with libstdc++'s own code. A stand-in built here shows the binding
// (LD_DEBUG=bindings: the system's remove_all bound to the stand-in's
// constructor and destructor), but did not crash: a GCC 12 build of the
// iterator under GCC 14's libstdc++ agrees on the layout. Whether the
// wheel's build agrees with the GPU machine's libstdc++ is not known.
// What is known: the programs that crashed under the 2.11 wheel on the GPU
// machine (28 on 2026-11-30, 3 on 2026-12-04, SIGSEGV, once with no frame
// to unwind) all remove directory trees (the checkpoint tests, the rank
// harness, fsdp-bench comm, the GPU trainer tests). So libfsdp, its tools
// and its tests walk trees with fts(3) from the C library, through the
// functions below, never with std::filesystem::remove_all or
// recursive_directory_iterator (scripts/lint.sh refuses them): the crash,
// if this is its cause, cannot happen, and if it is not, the next GPU run
// says so.
// scripts/gpu-check.sh lists the std::filesystem names the wheel exports.

#include <string>
#include <vector>

namespace fsdp {

// Removes `path` and, when it is a directory, everything under it. Symbolic
// links are removed, never followed. A path that does not exist is not an
// error. Returns "" on success, else which entry could not be removed and
// why (what is left stays in place).
std::string remove_tree(const std::string& path);
// The same, throwing std::runtime_error with that message on failure.
void remove_tree_or_throw(const std::string& path);

// Every regular file under `dir`, at any depth, sorted. Symbolic links are
// not followed, and files behind them are not listed. Throws
// std::runtime_error naming the entry when part of the tree cannot be read.
std::vector<std::string> regular_files_under(const std::string& dir);

}  // namespace fsdp
