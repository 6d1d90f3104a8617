#!/usr/bin/env python3
"""Runs Nova's functional test modules through nova-rtrack/run-functional.py in N parallel
worker processes and merges their results (called by scripts/nova-functional, which builds the
venv and rtrackd first).

    run.py --python VENV_PY --rtrackd BIN --out DIR [--baseline] [--workers N] [--list]
           [MODULE...]

Each module is one run-functional.py invocation (one test process), test_pci_sriov_servers
three (PARTS below); N of them run at a time, the longest first (seconds from the table below:
Nova's tracker, one module after another, on a 2-core machine), so the longest starts at once
and the short ones fill the other workers. Per-module JUnit XML and logs: DIR/modules/<mode>/; the
merged JUnit XML: DIR/<mode>.xml; measured times: DIR/<mode>-times.json. The last line printed is
``N passed, N failed, N known failures, N skipped``; the exit status is 1 when a test failed (or
a module did not produce its results), 0 otherwise.

Known failures: known-failures.txt beside this file lists, one per line, the tests that fail
with rtrack for a stated reason (``module.Class.test  reason``). In the rtrack mode such a
failure is counted as known (its JUnit entry becomes ``skipped`` with the reason and the failure
text) and does not fail the run; a listed test that passes is named so that the line can go.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RUNNER = os.path.join(REPO, 'nova-rtrack', 'run-functional.py')
PREFIX = 'nova.tests.functional.libvirt.'

# The modules of issue 22 (nova.tests.functional.libvirt.*): tests as the runner counts them,
# seconds with Nova's own tracker on a 2-core machine (sequential, one process per module).
MODULES: dict[str, tuple[int, int]] = {
    'test_pci_sriov_servers': (116, 392),
    'test_numa_servers': (56, 123),
    'test_pci_in_placement': (36, 68),
    'test_evacuate': (8, 62),
    'test_numa_live_migration': (13, 61),
    'test_vgpu': (18, 55),
    'test_power_manage': (18, 49),
    'test_live_migration': (6, 36),
    'test_reshape': (3, 15),
    'test_vpmem': (3, 13),
    'test_amd_sev': (4, 8),
    'test_shared_resource_provider': (3, 8),
    'test_rt_servers': (3, 7),
    'test_intel_tdx': (1, 3),
    # nova-rtrack's own, in Nova's fixtures: a running host switched from Nova's tracker
    # (skipped with --baseline, which has nothing to switch to).
    'nova_rtrack.testing.test_switch_over': (1, 10),
}
UNKNOWN_SECONDS = 30

# test_pci_sriov_servers is a third of all the tests' time, and beside cargo test on 2 cores it
# ran for over 20 minutes in one process: it runs in three parts (test processes), so that it
# neither holds one worker while the other has finished nor nears NOVA_FUNCTIONAL_TIMEOUT. Each
# part: (label, classes, seconds with Nova's tracker); classes None is the module without the
# other parts' classes, so a class a later Nova adds is still run.
PARTS: dict[str, list[tuple[str, Optional[list[str]], int]]] = {
    'test_pci_sriov_servers': [
        ('test_pci_sriov_servers-1', ['SRIOVServersTest'], 142),
        ('test_pci_sriov_servers-2',
         ['VDPAServersTest', 'SRIOVAttachDetachTest', 'TestPackNUMACellsWithPCIDevices',
          'PCIServersWithRequiredNUMATest', 'PCIResourceRequestReschedulingTest',
          'PCIServersWithPreferredNUMATest'], 114),
        ('test_pci_sriov_servers-3', None, 136),
    ],
}
KNOWN_FAILURES = os.path.join(HERE, 'known-failures.txt')

# The runner's process handling (kill_tree: rtrackd daemons live in sessions of their own).
sys.path.insert(0, os.path.join(REPO, 'nova-rtrack'))
from nova_rtrack.testing.supervise import kill_tree  # noqa: E402


def load_known(path: str) -> dict[str, str]:
    """``{test id relative to PREFIX: reason}`` from known-failures.txt."""
    known: dict[str, str] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return known
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        test, _, reason = line.partition('  ')
        if not reason.strip():
            raise SystemExit('%s:%d: expected "<module.Class.test>  <reason>", got %r'
                             % (path, n, line[:120]))
        known[test.strip()] = reason.strip()
    return known


def short_name(name: str) -> str:
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def weight(name: str) -> float:
    s = short_name(name)
    if s in MODULES:
        return MODULES[s][1]
    # One class or one test of a known module: a fraction of it; anything else: a guess.
    mod = s.split('.', 1)[0]
    if mod in MODULES:
        return MODULES[mod][1] / max(MODULES[mod][0], 1)
    return UNKNOWN_SECONDS


class Job:
    def __init__(self, name: str, tests: Optional[list[str]] = None,
                 excluded: Optional[list[str]] = None, seconds: Optional[float] = None) -> None:
        """One test process: ``name`` (a module, class or test), or a part of a module labelled
        ``name`` running ``tests`` without ``excluded``."""
        self.name = name
        self.short = short_name(name)
        self.weight = weight(name) if seconds is None else seconds
        self.tests = tests
        self.excluded = excluded or []
        self.worker: Optional[int] = None
        self.rc: Optional[int] = None
        self.wall = 0.0
        self.timed_out = False
        self.hung_once: list[str] = []
        self.proc: Optional[subprocess.Popen] = None


def jobs_for(name: str) -> list[Job]:
    """The test processes for ``name``: its parts when PARTS splits it, else one."""
    module = short_name(name)
    parts = PARTS.get(module)
    if not parts:
        return [Job(name)]
    named = [c for _, classes, _ in parts for c in classes or []]
    jobs = []
    for label, classes, seconds in parts:
        if classes is None:
            jobs.append(Job(label, [module], ['%s.%s' % (module, c) for c in named], seconds))
        else:
            jobs.append(Job(label, ['%s.%s' % (module, c) for c in classes], None, seconds))
    return jobs


class Runner:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.mode = 'baseline' if a.baseline else 'rtrack'
        self.mod_out = os.path.join(a.out, 'modules')
        self.mode_dir = os.path.join(self.mod_out, self.mode)
        self.lock = threading.Lock()
        self.queue: list[Job] = []
        self.running: list[Job] = []
        self.stopping = False
        self.known = {} if a.baseline else load_known(KNOWN_FAILURES)
        self.now_passing: list[str] = []

    def say(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)

    def command(self, job: Job) -> list[str]:
        cmd = [self.a.python, RUNNER, '--python', self.a.python, '--out', self.mod_out,
               '--rtrackd', self.a.rtrackd, '--nice', str(self.a.nice)]
        if self.a.baseline:
            cmd.append('--baseline')
        if job.tests is None:
            cmd.append(job.name)
            return cmd
        cmd += ['--together', job.short]
        for e in job.excluded:
            cmd += ['--exclude', e]
        return cmd + job.tests

    def run_job(self, wid: int, job: Job) -> None:
        job.worker = wid
        for ext in ('.xml', '.json'):
            try:
                os.unlink(os.path.join(self.mode_dir, job.short + ext))
            except OSError:
                pass
        os.makedirs(self.mode_dir, exist_ok=True)
        out_path = os.path.join(self.mode_dir, job.short + '.runner.log')
        self.say('[w%d] %s: started (expected about %.0f s with Nova\'s tracker)' % (
            wid, job.short, job.weight))
        t0 = time.time()
        with open(out_path, 'w') as out:
            job.proc = subprocess.Popen(self.command(job), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True, cwd=REPO)
            timer = threading.Timer(self.a.timeout, self.timeout, args=(job,))
            timer.daemon = True
            timer.start()
            assert job.proc.stdout is not None
            for line in job.proc.stdout:
                out.write(line)
                s = line.strip()
                if s.startswith('HUNG ONCE '):
                    job.hung_once.append(s.split()[2])
                if s.startswith(('FAILED ', 'HUNG ')) or (s.startswith(job.short + ':') and 'passed' in s):
                    self.say('[w%d] %s' % (wid, s))
            job.rc = job.proc.wait()
            timer.cancel()
        job.wall = time.time() - t0
        if job.timed_out:
            self.say('[w%d] %s: killed after %d s (NOVA_FUNCTIONAL_TIMEOUT)' % (
                wid, job.short, self.a.timeout))

    def timeout(self, job: Job) -> None:
        job.timed_out = True
        if job.proc is not None:
            kill_tree(job.proc)

    def worker(self, wid: int) -> None:
        while True:
            with self.lock:
                if self.stopping or not self.queue:
                    return
                job = self.queue.pop(0)
                self.running.append(job)
            try:
                self.run_job(wid, job)
            finally:
                with self.lock:
                    self.running.remove(job)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            jobs = list(self.running)
        for job in jobs:
            if job.proc is not None:
                kill_tree(job.proc)

    # -- results ------------------------------------------------------------------------------

    def collect(self, job: Job) -> tuple[ET.Element, dict[str, int]]:
        counts = {'passed': 0, 'failed': 0, 'known': 0, 'skipped': 0}
        path = os.path.join(self.mode_dir, job.short + '.xml')
        suite: Optional[ET.Element] = None
        try:
            suite = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            suite = None
        if suite is not None and suite.tag == 'testsuite':
            for tc in suite.iter('testcase'):
                test_id = '%s.%s' % (short_name(tc.get('classname', '')), tc.get('name', ''))
                bad = [e for e in tc if e.tag in ('failure', 'error')]
                if bad and test_id in self.known:
                    self.mark_known(tc, bad, self.known[test_id])
                    counts['known'] += 1
                elif bad:
                    counts['failed'] += 1
                elif tc.find('skipped') is not None:
                    counts['skipped'] += 1
                else:
                    counts['passed'] += 1
                    if test_id in self.known:
                        self.now_passing.append(test_id)
        else:
            suite = ET.Element('testsuite', name=job.short)
        if job.timed_out or job.rc not in (0, 1) or sum(counts.values()) == 0:
            why = ('killed after %d s (NOVA_FUNCTIONAL_TIMEOUT)' % self.a.timeout
                   if job.timed_out else
                   'run-functional.py exited %s with %d results (see %s)' % (
                       job.rc, sum(counts.values()),
                       os.path.join(self.mode_dir, job.short + '.runner.log')))
            tc = ET.SubElement(suite, 'testcase', classname=PREFIX + job.short,
                               name='module_run', time='%.3f' % job.wall)
            ET.SubElement(tc, 'failure', message=why).text = why
            counts['failed'] += 1
        elif job.rc == 1 and counts['failed'] == 0 and counts['known'] == 0:
            why = 'run-functional.py reported a failure its JUnit XML does not show'
            tc = ET.SubElement(suite, 'testcase', classname=PREFIX + job.short,
                               name='module_run', time='%.3f' % job.wall)
            ET.SubElement(tc, 'failure', message=why).text = why
            counts['failed'] += 1
        suite.set('name', '%s (%s)' % (job.short, self.mode))
        return suite, counts

    @staticmethod
    def mark_known(tc: ET.Element, bad: list[ET.Element], reason: str) -> None:
        text = '\n'.join((e.text or '') for e in bad)
        for e in bad:
            tc.remove(e)
        ET.SubElement(tc, 'skipped', message='known failure: ' + reason).text = text

    def main(self) -> int:
        a = self.a
        jobs = [j for n in a.names for j in jobs_for(n)]
        self.queue = sorted(jobs, key=lambda j: -j.weight)
        n_workers = max(1, min(a.workers, len(jobs)))
        expected = sum(j.weight for j in jobs)
        print('== nova-functional (%s): %d test processes, %d workers, about %.0f s of tests with '
              'Nova\'s tracker' % (self.mode, len(jobs), n_workers, expected), flush=True)
        t0 = time.time()
        threads = [threading.Thread(target=self.worker, args=(i + 1,), daemon=True)
                   for i in range(n_workers)]
        for t in threads:
            t.start()
        interrupted = False
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            interrupted = True
            print('nova-functional: interrupted, stopping the running modules', flush=True)
            self.stop_all()
            for t in threads:
                t.join(30)
        wall = time.time() - t0

        totals = {'passed': 0, 'failed': 0, 'known': 0, 'skipped': 0}
        root = ET.Element('testsuites', name='nova-functional-' + self.mode)
        rows = []
        times = {}
        for job in jobs:
            if job.rc is None and not job.timed_out:
                continue   # never started (interrupted)
            suite, counts = self.collect(job)
            root.append(suite)
            for k in totals:
                totals[k] += counts[k]
            rows.append((job, counts))
            times[job.short] = round(job.wall, 1)
        root.set('tests', str(sum(totals.values())))
        root.set('failures', str(totals['failed']))
        root.set('errors', '0')
        root.set('skipped', str(totals['skipped'] + totals['known']))
        root.set('time', '%.3f' % wall)
        merged = os.path.join(a.out, self.mode + '.xml')
        ET.ElementTree(root).write(merged, encoding='UTF-8', xml_declaration=True)
        with open(os.path.join(a.out, self.mode + '-times.json'), 'w') as f:
            json.dump({'wall': round(wall, 1), 'workers': n_workers, 'modules': times}, f,
                      indent=1)

        print('== nova-functional (%s), %d workers: %.1f s wall, %.1f s of module time' % (
            self.mode, n_workers, wall, sum(j.wall for j, _ in rows)))
        for job, c in sorted(rows, key=lambda r: -r[0].wall):
            print('  %-34s w%-2s %3d passed %3d failed %3d known %3d skipped %7.1f s' % (
                job.short, job.worker, c['passed'], c['failed'], c['known'], c['skipped'],
                job.wall))
        not_run = [j.short for j in jobs if j.rc is None and not j.timed_out]
        if not_run:
            print('  not run (interrupted): %s' % ' '.join(not_run))
        print('JUnit XML: %s (per module: %s/)' % (merged, self.mode_dir))
        for job, _ in rows:
            for test_id in job.hung_once:
                print('  hung once, then ran again in a fresh test process: %s (stacks in %s)'
                      % (test_id, os.path.join(self.mode_dir, job.short + '.log')))
        for test_id in self.now_passing:
            print('  now passes, remove it from %s: %s' % (KNOWN_FAILURES, test_id))
        print('%d passed, %d failed, %d known failures, %d skipped' % (
            totals['passed'], totals['failed'], totals['known'], totals['skipped']), flush=True)
        if interrupted:
            return 130
        return 0 if totals['failed'] == 0 and not not_run else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--python', help="the venv's python")
    p.add_argument('--rtrackd')
    p.add_argument('--out')
    p.add_argument('--baseline', action='store_true', help="Nova's own tracker")
    p.add_argument('--workers', type=int, default=int(os.environ.get('NOVA_FUNCTIONAL_WORKERS', 2)))
    p.add_argument('--nice', type=int, default=int(os.environ.get('NOVA_FUNCTIONAL_NICE', 10)))
    p.add_argument('--timeout', type=int,
                   default=int(os.environ.get('NOVA_FUNCTIONAL_TIMEOUT', 3600)),
                   help='seconds one module may take')
    p.add_argument('--list', action='store_true', help='print the default modules and exit')
    p.add_argument('names', nargs='*')
    a = p.parse_args()
    if a.list:
        for m, (n, s) in MODULES.items():
            print('%-32s %4d tests %4d s' % (m, n, s))
        print('%-32s %4d tests %4d s' % ('total', sum(n for n, _ in MODULES.values()),
                                          sum(s for _, s in MODULES.values())))
        return 0
    if not (a.python and a.rtrackd and a.out):
        p.error('--python, --rtrackd and --out are needed')
    if a.workers < 1:
        p.error('--workers must be at least 1')
    if not a.names:
        a.names = list(MODULES)
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    return Runner(a).main()


if __name__ == '__main__':
    sys.exit(main())
