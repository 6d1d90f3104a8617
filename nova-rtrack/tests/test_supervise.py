"""The functional-test supervisor: a hung test is stopped, its stacks logged, the rest of the
module run in a fresh process and the hung test run once more (nova_rtrack.testing.supervise),
with a real worker process running tests/hang_cases.py."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import unittest
from unittest import mock

from nova_rtrack.testing import supervise

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = 'tests.hang_cases.Cases'


class SupervisedRun(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.summary = os.path.join(self.tmp.name, 'summary.json')
        self.env = dict(os.environ, HANG_CASES_MARK=os.path.join(self.tmp.name, 'mark'))
        self.echoed: list[str] = []
        self.commands: list[list[str]] = []

    def cmd_for(self, done: list[str]) -> list[str]:
        cmd = [sys.executable, '-m', 'nova_rtrack.testing.worker', '--baseline',
               '--junit', os.path.join(self.tmp.name, 'j.xml'), '--summary', self.summary]
        cmd += [x for d in done for x in ('--exclude', d)] + [CASES]
        self.commands.append(cmd)
        return cmd

    def run_cases(self, **env: str) -> tuple[supervise.Supervised, str, float]:
        self.env.update(env)
        log_path = os.path.join(self.tmp.name, 'log')
        t0 = time.time()
        with open(log_path, 'w') as log:
            run = supervise.run_resuming(self.cmd_for, self.summary, os.path.dirname(HERE),
                                         self.env, log, log_path, self.echoed.append,
                                         hang_after=1.5)
        took = time.time() - t0
        with open(log_path) as f:
            return run, f.read(), took

    @staticmethod
    def outcomes(run: supervise.Supervised) -> dict[str, str]:
        return {r['id'].rpartition('.')[2]: r['outcome'] for r in run.records}

    def test_a_test_that_hangs_once_is_run_again_and_the_rest_still_runs(self) -> None:
        run, log, took = self.run_cases()
        self.assertEqual({'test_a': 'passed', 'test_b': 'passed', 'test_c': 'passed'},
                         self.outcomes(run))
        self.assertEqual(3, len(run.records), run.records)
        self.assertEqual(['%s.test_b' % CASES], run.hung_once)
        self.assertEqual(2, run.attempts)
        # The fresh process leaves out what the first one ran, not the hung test.
        self.assertIn('%s.test_a' % CASES, self.commands[1])
        self.assertNotIn('%s.test_b' % CASES, self.commands[1])
        # The stacks were asked for and reached the log: test_b's sleeping frame among them.
        self.assertIn('HUNG %s.test_b' % CASES, log)
        self.assertIn('in test_b', log)
        self.assertIn('END STACKS', log)
        self.assertTrue(any(e.startswith('HUNG %s.test_b' % CASES) for e in self.echoed))
        self.assertLess(took, 60, 'the hung test was not stopped')

    def test_a_test_that_hangs_again_fails_and_the_tests_after_it_run(self) -> None:
        run, _, _ = self.run_cases(HANG_CASES_ALWAYS='b')
        self.assertEqual({'test_a': 'passed', 'test_b': 'failed', 'test_c': 'passed'},
                         self.outcomes(run))
        self.assertEqual(3, len(run.records), run.records)
        b = [r for r in run.records if r['id'].endswith('test_b')]
        self.assertEqual(1, len(b))
        self.assertIn('hung again', b[0]['detail'])
        self.assertEqual([], run.hung_once)
        self.assertEqual(3, run.attempts)

    def test_without_a_hang_it_is_one_process_and_the_workers_own_summary(self) -> None:
        open(self.env['HANG_CASES_MARK'], 'w').close()
        run, _, _ = self.run_cases(HANG_CASES_FAIL_C='1')
        self.assertEqual({'test_a': 'passed', 'test_b': 'passed', 'test_c': 'failed'},
                         self.outcomes(run))
        self.assertEqual(1, run.attempts)
        with open(self.summary) as f:
            self.assertEqual(run.records, json.load(f)['records'])
        c = [r for r in run.records if r['id'].endswith('test_c')][0]
        self.assertIn('told to fail', c['detail'])


    def test_past_the_hung_tests_allowed_the_rest_is_given_up_and_said_so(self) -> None:
        with mock.patch.object(supervise, 'MAX_HUNG_TESTS', 1):
            run, _, _ = self.run_cases(HANG_CASES_ALWAYS='abc')
        # test_a hangs twice (failed); test_b is the second test to hang: given up, and
        # test_c, never run, is named in the closing failure.
        self.assertEqual({'test_a': 'failed', 'test_b': 'failed', 'hung_tests': 'failed'},
                         self.outcomes(run))
        self.assertIn('hung again', run.records[0]['detail'])
        self.assertIn('the 1 tests after it', run.records[2]['detail'])
        self.assertEqual(3, run.attempts)


class StreamTest(unittest.TestCase):
    def test_results_details_and_the_running_test(self) -> None:
        s = supervise.Stream()
        self.assertEqual('protocol', s.feed('TESTS 12\n', 9.0))
        self.assertEqual(12, s.total)
        self.assertEqual('protocol', s.feed('START m.C.t1\n', 10.0))
        self.assertEqual(('m.C.t1', 5.0), s.running_for(15.0))
        self.assertEqual('log', s.feed('anything a test prints\n', 11.0))
        self.assertEqual('result', s.feed('FAILED m.C.t1 1.25s\n', 12.0))
        self.assertIsNone(s.running_for(20.0))
        for line in ('DETAIL m.C.t1\n', 'Traceback (most recent call last)\n',
                     'END DETAIL nope\n', 'END DETAIL\n'):
            self.assertEqual('protocol', s.feed(line, 12.0))
        self.assertEqual([{'id': 'm.C.t1', 'outcome': 'failed', 'time': 1.25,
                           'detail': 'Traceback (most recent call last)\nEND DETAIL nope\n'}],
                         s.records)

    def test_a_result_line_without_a_time_is_log_not_a_result(self) -> None:
        s = supervise.Stream()
        self.assertEqual('log', s.feed('PASSED the build\n', 1.0))
        self.assertEqual('log', s.feed('PASSED\n', 1.0))
        self.assertEqual([], s.records)
