#pragma once
// Checks on error text: the message is part of the interface (see
// CONVENTIONS.md, "Test the error text itself").
//
//   EXPECT_THROWS_WITH(group->broadcast(t, 7), "root 7 is out of range");

#include <gtest/gtest.h>

#include <exception>
#include <string>

#define FSDP_THROWS_WITH_IMPL_(statement, substring, fail_macro)                         \
  do {                                                                                   \
    bool fsdp_threw_ = false;                                                            \
    try {                                                                                \
      statement;                                                                         \
    } catch (const std::exception& fsdp_e_) {                                            \
      fsdp_threw_ = true;                                                                \
      const std::string fsdp_what_ = fsdp_e_.what();                                     \
      if (fsdp_what_.find(substring) == std::string::npos) {                             \
        fail_macro() << "`" #statement "` threw, but the message lacks \"" << (substring) \
                     << "\":\n"                                                          \
                     << fsdp_what_;                                                      \
      }                                                                                  \
    }                                                                                    \
    if (!fsdp_threw_) fail_macro() << "`" #statement "` did not throw";                  \
  } while (0)

// Fails the test (and continues) unless `statement` throws a std::exception
// whose what() contains `substring`.
#define EXPECT_THROWS_WITH(statement, substring) \
  FSDP_THROWS_WITH_IMPL_(statement, substring, ADD_FAILURE)
// Same, but returns from the current function on failure.
#define ASSERT_THROWS_WITH(statement, substring) \
  FSDP_THROWS_WITH_IMPL_(statement, substring, GTEST_FAIL)
