"""Runs a test module's unittest cases for CTest: exit 1 when any failed, 77 (the SKIP_RETURN_CODE the tests
are registered with in tests/CMakeLists.txt) when any was skipped and none failed, else 0. unittest's own
main exits 0 after a skipTest, which CTest would report as passed with the check never run.

    run(names)   names: test case classes or methods of the calling module ("Class", "Class.test_x");
                 none runs them all."""

import sys
import unittest

SKIP = 77


def run(names=(), module="__main__"):
    loader = unittest.TestLoader()
    main = sys.modules[module]
    suite = loader.loadTestsFromNames(list(names), main) if names else loader.loadTestsFromModule(main)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        for test, why in result.skipped:
            print(f"SKIPPED {test.id()}: {why}")
        sys.exit(SKIP)
    if result.testsRun == 0:
        print(f"no test matched {list(names)}")
        sys.exit(1)
    sys.exit(0)
