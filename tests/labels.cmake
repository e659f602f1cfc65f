# CTest labels of single test cases, read by CTest after it has discovered
# the cases (tests/CMakeLists.txt appends this file to TEST_INCLUDE_FILES).
# What each label means is listed at the top of tests/CMakeLists.txt. A case
# renamed without updating its line here makes CTest report that it cannot
# find it.
set_tests_properties(Multihost.TwoHostNamespaces PROPERTIES LABELS "root;netns")
set_tests_properties(Multihost.MpirunLaunch PROPERTIES LABELS "mpirun")
# test_launcher_faults' cases also carry `sanitize` (tests/CMakeLists.txt),
# named again here: set_tests_properties replaces the labels, and CTest's
# set_property(TEST ...) finds no test that discovery added.
set_tests_properties(Launcher.WorkerStoppedLongerThanTheTimeoutIsNamedAndTheJobEnds
                     Launcher.WorkerContinuedInTimeIsLeftAlone PROPERTIES LABELS "signals;sanitize")
set_tests_properties(RendezvousDeadline.RankZeroStoppedBeforeTheGroupExistsFailsEveryOtherRankNamingIt
                     PROPERTIES LABELS "signals")
