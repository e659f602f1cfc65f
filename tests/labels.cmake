# The test cases that run as CTest tests of their own, out of their suite's
# (suite_tests.cmake), with the CTest labels they carry on top of their
# executable's (what each label means is listed at the top of
# tests/CMakeLists.txt). A case renamed without updating its line here makes
# CTest stop, naming it.

# Labels of their own.
fsdp_case_alone(Multihost.TwoHostNamespaces root netns)
fsdp_case_alone(Multihost.MpirunLaunch mpirun)
fsdp_case_alone(LauncherFaults.WorkerStoppedLongerThanTheTimeoutIsNamedAndTheJobEnds signals)
fsdp_case_alone(LauncherFaults.WorkerContinuedInTimeIsLeftAlone signals)
fsdp_case_alone(RendezvousDeadline.RankZeroStoppedBeforeTheGroupExistsFailsEveryOtherRankNamingIt signals)

# A fresh process: each sets glibc's malloc thresholds, which no call resets,
# and measures page faults against glibc's defaults.
fsdp_case_alone(CpuHeap.FreedBuffersComeBackWithoutFaultingTheirPagesIn)
fsdp_case_alone(CpuHeap.BuffersAboveTheGivenSizeAreStillMapped)
