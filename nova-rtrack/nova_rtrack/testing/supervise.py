"""Runs one functional test process (:mod:`.worker`) and stops it when a test hangs.

A few of Nova's libvirt tests run both hosts' periodics inside an RPC handler that holds the
cell fixture's read lock; now and then the test's own API poll queues for the write lock in
between and Nova's fixture deadlocks (docs/nova-compute.md). The stuck handler also hangs the
test's cleanup, so oslotest's timeout cannot end it, and the whole test process used to sit
until the runner killed it, losing the module's results.

The worker reports on its stderr how many tests it runs (``TESTS n``), then each test
(``START id``, then ``PASSED|FAILED|SKIPPED id 1.23s``, a failure's traceback between
``DETAIL id`` and ``END DETAIL``). This module reads that
stream; when one test has run ``hang_after`` seconds without a result, it asks the worker for
every greenlet's stack (SIGUSR1, into the log), kills the worker and its rtrackd daemons, and
starts a fresh process for the tests not run yet. The hung test runs once more, first: passing
then, it counts as passed and is named as having hung once; hanging again, it fails. After
``MAX_HUNG_TESTS`` distinct tests hung, one more hang gives the rest of the module up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, IO, Optional

# Seconds a test may run without a result. Nova's slowest libvirt test took 72 s beside
# cargo test on 2 cores (2026-11-28); oslotest's own OS_TEST_TIMEOUT (300 s) stays the backstop
# for a worker run by hand.
HANG_AFTER_S = 180.0
# Distinct tests of one module that may hang before the rest of it is given up.
MAX_HUNG_TESTS = 3
# Seconds the worker gets to print its stacks after SIGUSR1 (it walks every object of a large
# process, niced, on busy cores).
STACKS_WAIT_S = 20.0

Record = dict[str, Any]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (rtrackd runs in a session of its own, so a process group
    kill would miss it)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(')', 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, ``proc`` and everything below it."""
    if proc.poll() is not None:
        return
    pids = descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in [proc.pid] + pids:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
            break
        except subprocess.TimeoutExpired:
            continue
    for p in pids:   # stragglers that outlived their parent (rtrackd daemons)
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


@dataclass
class Stream:
    """What the worker's stderr said so far: how many tests it runs, the results, and the test
    running now."""
    records: list[Record] = field(default_factory=list)
    # The tests the process is to run (``TESTS n``), -1 until it says.
    total: int = -1
    current: Optional[str] = None
    started: float = 0.0
    _detail_of: Optional[str] = None
    _detail: list[str] = field(default_factory=list)

    def feed(self, line: str, now: float) -> str:
        """Takes one line; answers ``'result'`` for a result line, ``'protocol'`` for another
        line of the protocol, ``'log'`` for anything else (the tests' own output)."""
        if self._detail_of is not None:
            if line.rstrip('\n') == 'END DETAIL':
                self._attach(self._detail_of, ''.join(self._detail))
                self._detail_of, self._detail = None, []
            else:
                self._detail.append(line)
            return 'protocol'
        word, _, rest = line.rstrip('\n').partition(' ')
        if word == 'TESTS' and rest.isdigit():
            self.total = int(rest)
            return 'protocol'
        if word == 'START' and rest:
            self.current, self.started = rest, now
            return 'protocol'
        if word == 'DETAIL' and rest:
            self._detail_of = rest
            return 'protocol'
        if word in ('PASSED', 'FAILED', 'SKIPPED') and rest:
            test_id, _, secs = rest.rpartition(' ')
            try:
                took = float(secs.rstrip('s'))
            except ValueError:
                return 'log'
            self.records.append({'id': test_id, 'outcome': word.lower(), 'time': took,
                                 'detail': ''})
            self.current = None
            return 'result'
        return 'log'

    def _attach(self, test_id: str, detail: str) -> None:
        for r in reversed(self.records):
            if r['id'] == test_id:
                r['detail'] = detail
                return

    def running_for(self, now: float) -> Optional[tuple[str, float]]:
        if self.current is None:
            return None
        return self.current, now - self.started


@dataclass
class Attempt:
    """One test process: its results as streamed, the test it hung in (None when it ended by
    itself) and its exit status."""
    records: list[Record]
    hung: Optional[str]
    rc: int
    # Tests it was to run and did not (when it said how many), besides the hung one.
    left: Optional[int] = None


def run_once(cmd: list[str], cwd: str, env: dict[str, str], log: IO[str],
             echo: Callable[[str], None], hang_after: float = HANG_AFTER_S) -> Attempt:
    """Runs the worker ``cmd``; its stdout and the tests' output go to ``log``, each result
    line to ``echo``. A test without a result after ``hang_after`` seconds stops it."""
    stream = Stream()
    lock = threading.Lock()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.PIPE,
                            text=True, errors='replace')
    hung: list[str] = []
    done = threading.Event()
    stacks_written = threading.Event()

    def watch() -> None:
        while not done.wait(1.0):
            with lock:
                running = stream.running_for(time.monotonic())
            if running is None or running[1] < hang_after:
                continue
            log.write('HUNG %s: no result after %.0f s; the stacks follow, then the test '
                      'process is killed\n' % running)
            log.flush()
            try:
                proc.send_signal(signal.SIGUSR1)
            except OSError:
                pass
            stacks_written.wait(STACKS_WAIT_S)
            with lock:
                if stream.current != running[0]:
                    # Only slow: it ended while its stacks were taken. Watch on.
                    log.write('HUNG %s: ended after all, not killed\n' % running[0])
                    stacks_written.clear()
                    continue
                hung.append(running[0])
            kill_tree(proc)
            return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert proc.stderr is not None
    for line in proc.stderr:
        with lock:
            kind = stream.feed(line, time.monotonic())
        if kind == 'result':
            echo(line.rstrip('\n'))
        elif kind == 'log':
            log.write(line)
            log.flush()
            if line == 'END STACKS\n':
                stacks_written.set()
    proc.stderr.close()
    rc = proc.wait()
    done.set()
    watcher.join()
    left = None
    if hung and stream.total >= 0:
        left = max(stream.total - len(stream.records) - 1, 0)
    return Attempt(stream.records, hung[0] if hung else None, rc, left)


def hung_record(test_id: str, seconds: float, log_path: str, again: bool) -> Record:
    what = 'hung again in a fresh test process' if again else 'hung'
    return {'id': test_id, 'outcome': 'failed', 'time': seconds,
            'detail': '%s: no result after %.0f s (the stacks of every greenlet are in %s, '
                      'after "HUNG %s")' % (what, seconds, log_path, test_id)}


def finished_records(attempt: Attempt, summary_path: str,
                     log_path: str) -> tuple[list[Record], Optional[dict[str, Any]]]:
    """The results of a test process that ended by itself: its summary's (failures with the
    tests' captured logs), else what it streamed and a failure saying the summary is missing."""
    try:
        with open(summary_path) as f:
            summary = json.load(f)
        return list(summary['records']), summary
    except (OSError, ValueError, KeyError, TypeError):
        missing = {'id': 'worker', 'outcome': 'failed', 'time': 0.0,
                   'detail': 'the test process exited %s without a summary (see %s)' % (
                       attempt.rc, log_path)}
        return attempt.records + [missing], None


@dataclass
class Supervised:
    """Every test's one result, the tests that hung once and passed or failed when run again,
    the last summary the worker wrote (None if none) and how many test processes it took."""
    records: list[Record]
    hung_once: list[str]
    summary: Optional[dict[str, Any]]
    attempts: int


def run_resuming(cmd_for: Callable[[list[str]], list[str]], summary_path: str, cwd: str,
                 env: dict[str, str], log: IO[str], log_path: str,
                 echo: Callable[[str], None], hang_after: float = HANG_AFTER_S) -> Supervised:
    """Runs ``cmd_for([])``, the worker writing its summary to ``summary_path``; after a hang,
    ``cmd_for(ids)`` with the ids of the tests already done left out, the hung test run once
    more (see the module's docstring). Every test has one record."""
    records: list[Record] = []
    seen: set[str] = set()
    excluded: list[str] = []
    hung_before: set[str] = set()
    hung_once: list[str] = []
    attempts = 0
    while True:
        attempts += 1
        try:
            os.unlink(summary_path)
        except OSError:
            pass
        attempt = run_once(cmd_for(excluded), cwd, env, log, echo, hang_after)
        summary = None
        got = attempt.records
        if attempt.hung is None:
            got, summary = finished_records(attempt, summary_path, log_path)
        for r in got:
            if r['id'] in seen:
                continue   # a class's setUpClass failure, run again in a fresh process
            seen.add(r['id'])
            if r['id'] in hung_before:
                hung_once.append(r['id'])
                r['detail'] = ('hung in its first test process, %s in a fresh one (stacks in '
                               '%s)\n%s' % (r['outcome'], log_path, r['detail']))
            records.append(r)
        hung = attempt.hung
        if hung is None:
            return Supervised(records, hung_once, summary, attempts)
        # A fixture's failure (`setUpClass (m.C)`) names no test to leave out.
        excluded += [r['id'] for r in attempt.records if ' ' not in r['id']]
        if any(r['id'] == hung for r in attempt.records):
            continue   # its result came as it was killed: only the tests after it are left
        if hung in hung_before or len(hung_before) >= MAX_HUNG_TESTS:
            records.append(hung_record(hung, hang_after, log_path, hung in hung_before))
            seen.add(hung)
            excluded.append(hung)
            echo('FAILED %s %.2fs' % (hung, hang_after))
            if hung in hung_before:
                continue
            if attempt.left != 0:
                records.append(given_up(attempt.left, log_path))
            return Supervised(records, hung_once, None, attempts)
        hung_before.add(hung)
        echo('HUNG %s %.2fs (run again in a fresh test process)' % (hung, hang_after))


def given_up(left: Optional[int], log_path: str) -> Record:
    tests = 'the %d tests after it' % left if left is not None else 'the tests after it'
    return {'id': 'hung_tests', 'outcome': 'failed', 'time': 0.0,
            'detail': '%d tests hung: %s in this test process were not run (see %s)' % (
                MAX_HUNG_TESTS + 1, tests, log_path)}
