# CTest labels of single test cases, read by CTest after it has discovered
# the cases (tests/CMakeLists.txt appends this file to TEST_INCLUDE_FILES).
# What each label means is listed at the top of tests/CMakeLists.txt. A case
# renamed without updating its line here makes CTest report that it cannot
# find it.
set_tests_properties(Multihost.TwoHostNamespaces PROPERTIES LABELS "root;netns")
set_tests_properties(Multihost.MpirunLaunch PROPERTIES LABELS "mpirun")
# Appended: test_launcher's cases also carry `sanitize`.
set_property(TEST Launcher.WorkerStoppedLongerThanTheTimeoutIsNamedAndTheJobEnds
                  Launcher.WorkerContinuedInTimeIsLeftAlone APPEND PROPERTY LABELS "signals")
set_tests_properties(RendezvousDeadline.RankZeroStoppedBeforeTheGroupExistsFailsEveryOtherRankNamingIt
                     PROPERTIES LABELS "signals")
