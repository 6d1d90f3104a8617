"""The functional-test worker's skip list (RTRACK_NOVA_SKIP) and its --exclude."""

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


class _Other(unittest.TestCase):
    def test_a(self) -> None:
        pass


class WithoutExcludedTest(unittest.TestCase):
    def suite(self) -> unittest.TestSuite:
        loader = unittest.TestLoader()
        return unittest.TestSuite([loader.loadTestsFromTestCase(_Case),
                                   unittest.TestSuite([loader.loadTestsFromTestCase(_Other)])])

    def ids(self, suite: unittest.TestSuite) -> list[str]:
        return [t.id() for t in worker.flatten(suite)]

    def test_a_class_or_a_test_is_left_out_and_nothing_else(self) -> None:
        cls = '%s._Case' % __name__
        kept = worker.without_excluded(self.suite(), [cls])
        self.assertEqual([_Other('test_a').id()], self.ids(kept))
        kept = worker.without_excluded(self.suite(), [_Case('test_a').id()])
        self.assertEqual([_Case('test_b').id(), _Other('test_a').id()], self.ids(kept))

    def test_a_prefix_of_a_class_name_is_not_that_class(self) -> None:
        # "_Cas" names no class here: _Case's tests stay.
        kept = worker.without_excluded(self.suite(), ['%s._Cas' % __name__])
        self.assertEqual(3, len(self.ids(kept)))

    def test_nothing_excluded_is_the_same_suite(self) -> None:
        suite = self.suite()
        self.assertIs(suite, worker.without_excluded(suite, []))
