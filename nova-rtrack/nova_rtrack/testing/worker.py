"""Runs test names in this process (one module per process), with or without the hook.

    python -m nova_rtrack.testing.worker [--baseline] --junit FILE --summary FILE NAME...

Writes JUnit XML and a JSON summary; everything the tests print goes to this process's
stdout/stderr (the runner sends them to a log file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import unittest
from typing import Any
from xml.sax.saxutils import escape, quoteattr


class Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []
        self._t0: dict[str, float] = {}

    def startTest(self, test: Any) -> None:
        super().startTest(test)
        self._t0[test.id()] = time.time()
        sys.__stderr__.write('START %s\n' % test.id())
        sys.__stderr__.flush()

    def _rec(self, test: Any, outcome: str, detail: str = '') -> None:
        t = time.time() - self._t0.get(test.id(), time.time())
        self.records.append({'id': test.id(), 'outcome': outcome, 'time': t,
                             'detail': detail})
        sys.__stderr__.write('%s %s %.2fs\n' % (outcome.upper(), test.id(), t))
        if outcome == 'failed' and detail:
            # The traceback (not the captured logs before it) into the module's log at once.
            tb = detail[detail.rfind('Traceback (most recent call last)'):] \
                if 'Traceback (most recent call last)' in detail else detail[-3000:]
            sys.__stderr__.write('DETAIL %s\n%s\nEND DETAIL\n' % (test.id(), tb[-6000:]))
        sys.__stderr__.flush()

    def addSuccess(self, test: Any) -> None:
        super().addSuccess(test)
        self._rec(test, 'passed')

    def addFailure(self, test: Any, err: Any) -> None:
        super().addFailure(test, err)
        self._rec(test, 'failed', self._exc_info_to_string(err, test))

    def addError(self, test: Any, err: Any) -> None:
        super().addError(test, err)
        self._rec(test, 'failed', self._exc_info_to_string(err, test))

    def addSkip(self, test: Any, reason: str) -> None:
        super().addSkip(test, reason)
        self._rec(test, 'skipped', reason)

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._rec(test, 'passed', 'expected failure')

    def addUnexpectedSuccess(self, test: Any) -> None:
        super().addUnexpectedSuccess(test)
        self._rec(test, 'failed', 'unexpected success')


def write_junit(path: str, suite_name: str, records: list[dict[str, Any]],
                wall: float) -> None:
    n_fail = sum(1 for r in records if r['outcome'] == 'failed')
    n_skip = sum(1 for r in records if r['outcome'] == 'skipped')
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<testsuite name=%s tests="%d" failures="%d" errors="0" skipped="%d" '
             'time="%.3f">' % (quoteattr(suite_name), len(records), n_fail, n_skip, wall)]
    for r in records:
        cls, _, name = r['id'].rpartition('.')
        lines.append('  <testcase classname=%s name=%s time="%.3f">' % (
            quoteattr(cls), quoteattr(name), r['time']))
        if r['outcome'] == 'failed':
            first = (r['detail'].strip().splitlines() or ['failed'])[-1][:200]
            lines.append('    <failure message=%s>%s</failure>' % (
                quoteattr(first), escape(r['detail'])))
        elif r['outcome'] == 'skipped':
            lines.append('    <skipped message=%s/>' % quoteattr(r['detail'][:200]))
        lines.append('  </testcase>')
    lines.append('</testsuite>')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def dump_stacks(signum: int, frame: Any) -> None:
    """SIGUSR1: every greenlet's and thread's stack to stderr (a hung test or storm, under
    eventlet)."""
    import gc
    out = []
    try:
        import greenlet
        for o in gc.get_objects():
            if isinstance(o, greenlet.greenlet) and o.gr_frame is not None:
                out.append('---- greenlet %r\n%s' % (o, ''.join(
                    traceback.format_stack(o.gr_frame))))
    except ImportError:
        pass
    for tid, fr in sys._current_frames().items():
        out.append('==== thread %s\n%s' % (tid, ''.join(traceback.format_stack(fr))))
    sys.__stderr__.write('STACKS\n' + '\n'.join(out) + '\nEND STACKS\n')
    sys.__stderr__.flush()


def flatten(suite: Any) -> list[Any]:
    """The test cases of a (nested) suite, in order."""
    if isinstance(suite, unittest.TestSuite):
        return [t for s in suite for t in flatten(s)]
    return [suite]


def without_skipped(suite: unittest.TestSuite, result: Any) -> unittest.TestSuite:
    """The suite without the tests named in ``RTRACK_NOVA_SKIP`` (comma-separated full test
    ids), each recorded as skipped: tests that can deadlock in Nova's own fixtures rather than
    fail (see scripts/test)."""
    names = {n.strip() for n in os.environ.get('RTRACK_NOVA_SKIP', '').split(',') if n.strip()}
    if not names:
        return suite
    kept = unittest.TestSuite()
    for t in flatten(suite):
        if t.id() in names:
            result.addSkip(t, 'RTRACK_NOVA_SKIP: can deadlock in Nova\'s cell fixture')
        else:
            kept.addTest(t)
    return kept


def without_excluded(suite: unittest.TestSuite, excluded: list[str]) -> unittest.TestSuite:
    """The suite without the tests under the dotted names in ``excluded`` (a class or a test):
    what another test process of the same module runs (scripts/nova-functional.d/run.py)."""
    if not excluded:
        return suite
    kept = unittest.TestSuite()
    for t in flatten(suite):
        if not any(t.id() == e or t.id().startswith(e + '.') for e in excluded):
            kept.addTest(t)
    return kept


def main(argv: list[str]) -> int:
    import signal
    signal.signal(signal.SIGUSR1, dump_stacks)
    p = argparse.ArgumentParser()
    p.add_argument('--baseline', action='store_true')
    p.add_argument('--junit', required=True)
    p.add_argument('--summary', required=True)
    p.add_argument('--suite', default='nova-functional')
    p.add_argument('--exclude', action='append', default=[],
                   help='leave out the tests under this dotted name (repeatable)')
    p.add_argument('names', nargs='+')
    a = p.parse_args(argv)
    if not a.baseline:
        from nova_rtrack.testing import hook
        hook.install()
    t0 = time.time()
    loader = unittest.TestLoader()
    result = Result()
    load_errors = []
    suite = unittest.TestSuite()
    for name in a.names:
        try:
            suite.addTests(loader.loadTestsFromName(name))
        except Exception:  # noqa
            load_errors.append({'id': name, 'outcome': 'failed', 'time': 0.0,
                                'detail': traceback.format_exc()})
    suite = without_skipped(without_excluded(suite, a.exclude), result)
    # How many tests this process runs: its supervisor can tell what a hang left unrun.
    sys.__stderr__.write('TESTS %d\n' % suite.countTestCases())
    sys.__stderr__.flush()
    try:
        suite.run(result)
    except Exception:  # noqa
        load_errors.append({'id': 'run', 'outcome': 'failed', 'time': 0.0,
                            'detail': traceback.format_exc()})
    wall = time.time() - t0
    records = load_errors + result.records
    write_junit(a.junit, a.suite, records, wall)
    summary: dict[str, Any] = {'wall': wall, 'records': records}
    if not a.baseline:
        from nova_rtrack.testing import launcher
        summary['harness'] = launcher.stats()
        launcher.shutdown()
    with open(a.summary, 'w') as f:
        json.dump(summary, f, indent=1)
    os._exit(0)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
