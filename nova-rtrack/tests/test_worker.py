"""The functional-test worker's skip list (RTRACK_NOVA_SKIP)."""

from __future__ import annotations

import os
import unittest
from unittest import mock

from nova_rtrack.testing import worker


class _Case(unittest.TestCase):
    def test_a(self) -> None:
        pass

    def test_b(self) -> None:
        pass


class WithoutSkippedTest(unittest.TestCase):
    def suite(self) -> unittest.TestSuite:
        loaded = unittest.TestLoader().loadTestsFromTestCase(_Case)
        return unittest.TestSuite([unittest.TestSuite([loaded])])

    def test_named_tests_are_recorded_skipped_and_left_out(self) -> None:
        result = unittest.TestResult()
        skip = _Case('test_b').id()
        with mock.patch.dict(os.environ, {'RTRACK_NOVA_SKIP': ' %s , ' % skip}):
            kept = worker.without_skipped(self.suite(), result)
        self.assertEqual([_Case('test_a').id()], [t.id() for t in worker.flatten(kept)])
        self.assertEqual([skip], [t.id() for t, _ in result.skipped])

    def test_without_the_variable_the_suite_is_unchanged(self) -> None:
        result = unittest.TestResult()
        suite = self.suite()
        with mock.patch.dict(os.environ, {'RTRACK_NOVA_SKIP': ''}):
            self.assertIs(suite, worker.without_skipped(suite, result))
        self.assertEqual([], result.skipped)
