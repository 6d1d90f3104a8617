#!/usr/bin/env python3
"""Runs Nova's functional test modules with nova-compute on rtrack (or, --baseline, on
Nova's own tracker), one process per module, and prints ``N passed, N failed, N skipped``.

    run-functional.py [--baseline] [--junit-dir DIR] [--python PY] [--out DIR]
                      [--rtrackd BIN] [--together LABEL] [--exclude NAME]...
                      [MODULE_OR_TEST...]

MODULE may be short (``test_rt_servers``: looked up under nova.tests.functional.libvirt) or a
dotted name down to one test. JUnit XML goes to ``--junit-dir`` as ``<module>.xml`` when given,
else to ``OUT/<mode>/<module>.xml`` (default OUT: the repository's target/nova-functional);
each module's output goes to ``OUT/<mode>/<module>.log``, its JSON summary beside it. The last
line printed is ``N passed, N failed, N skipped``; the exit status is 0 when nothing failed.
``--together LABEL`` runs all the names in one process whose files are named LABEL;
``--exclude NAME`` (a class or a test, repeatable) leaves those tests out: how
scripts/nova-functional runs one long module in parts. A test without a result after
``RTRACK_NOVA_HANG_S`` seconds (default 180) is stopped and the rest run in a fresh test
process (nova_rtrack.testing.supervise); the module's files then hold all its processes'
results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from nova_rtrack.testing import supervise
from nova_rtrack.testing.worker import write_junit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# The venv scripts/nova-functional builds (nova 34.0.0 and the test requirements).
DEFAULT_PY = os.path.join(REPO, 'target', 'nova-functional-venv', 'bin', 'python')
DEFAULT_RTRACKD = os.path.join(REPO, 'target', 'release', 'rtrackd')
DEFAULT_OUT = os.path.join(REPO, 'target', 'nova-functional')
PREFIX = 'nova.tests.functional.libvirt.'


def site_packages(py: str) -> str:
    return subprocess.check_output(
        [py, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
        text=True).strip()


def snapshot_binary(path: str, bindir: str) -> str:
    """A private copy of rtrackd for this run (the given one may be rebuilt while the run
    goes on): ``bindir/rtrackd-<mtime>-<size>``, reused when already there."""
    st = os.stat(path)
    os.makedirs(bindir, exist_ok=True)
    dst = os.path.join(bindir, 'rtrackd-%d-%d' % (int(st.st_mtime), st.st_size))
    if not os.path.exists(dst):
        tmp = dst + '.tmp%d' % os.getpid()
        shutil.copy2(path, tmp)
        os.replace(tmp, dst)
    print('rtrackd: %s (copy of %s, %s)' % (dst, path, time.strftime(
        '%Y-%m-%d %H:%M:%S', time.localtime(st.st_mtime))), flush=True)
    return dst


def full_name(name: str) -> str:
    # Nova's modules by their short name; nova-rtrack's own (nova_rtrack.testing.test_*) whole.
    return name if name.startswith(('nova.', 'nova_rtrack.')) else PREFIX + name


def units(names: list[str], together: str | None) -> list[tuple[str, list[str]]]:
    """``(label, full names)`` per test process: one per name, or all of them under the label
    ``together``."""
    fulls = [full_name(n) for n in names]
    if together is not None:
        return [(together, fulls)]
    return [(f[len(PREFIX):] if f.startswith(PREFIX) else f, [f]) for f in fulls]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--baseline', action='store_true', help="Nova's own tracker")
    p.add_argument('--python', default=DEFAULT_PY)
    p.add_argument('--out', default=DEFAULT_OUT, help='logs and summaries (and JUnit XML '
                   'without --junit-dir) under OUT/<mode>/')
    p.add_argument('--junit-dir', default=None, help='JUnit XML files here, one per module')
    p.add_argument('--rtrackd', default=os.environ.get('RTRACKD', DEFAULT_RTRACKD))
    p.add_argument('--nice', type=int, default=10)
    p.add_argument('--quiet', action='store_true', help='no per-test lines')
    p.add_argument('--together', metavar='LABEL', default=None,
                   help='run all the names in one test process, its files named LABEL')
    p.add_argument('--exclude', action='append', default=[], metavar='NAME',
                   help='leave out the tests under this class or test (repeatable)')
    p.add_argument('names', nargs='*', default=['test_rt_servers'])
    a = p.parse_args()
    if a.together is not None and not a.together.replace('-', '').replace('_', '').isalnum():
        p.error('--together needs a label of letters, digits, - and _, got %r' % a.together[:80])

    mode = 'baseline' if a.baseline else 'rtrack'
    outdir = os.path.join(a.out, mode)
    os.makedirs(outdir, exist_ok=True)
    junit_dir = os.path.abspath(a.junit_dir) if a.junit_dir else outdir
    os.makedirs(junit_dir, exist_ok=True)
    sp = site_packages(a.python)
    env = dict(os.environ)
    env['PYTHONPATH'] = HERE + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    if not a.baseline:
        env['RTRACKD'] = snapshot_binary(a.rtrackd, os.path.join(a.out, 'bin'))
    env.setdefault('RTRACK_HARNESS_DIR', os.path.join(a.out, 'harness'))
    # oslotest's per-test timeout (Nova's base test case honours it): a test that hangs fails
    # after this many seconds instead of holding its module until the module's timeout.
    env.setdefault('OS_TEST_TIMEOUT', '300')
    # A test without a result after this many seconds is stopped and run again in a fresh
    # test process (nova_rtrack.testing.supervise): before OS_TEST_TIMEOUT, whose cleanup a
    # deadlocked fixture hangs too.
    hang_after = float(os.environ.get('RTRACK_NOVA_HANG_S', supervise.HANG_AFTER_S))

    def echo(line: str) -> None:
        if not a.quiet:
            print('  ' + line, flush=True)

    totals = {'passed': 0, 'failed': 0, 'skipped': 0}
    rows = []
    t_all = time.time()
    excluded = [full_name(e) for e in a.exclude]
    for short, fulls in units(a.names, a.together):
        junit = os.path.join(junit_dir, short + '.xml')
        summary = os.path.join(outdir, short + '.json')
        log = os.path.join(outdir, short + '.log')
        base = ['nice', '-n', str(a.nice), a.python, '-m', 'nova_rtrack.testing.worker',
                '--junit', junit, '--summary', summary, '--suite', short]
        if a.baseline:
            base.append('--baseline')

        def cmd_for(done: list[str], fulls: list[str] = fulls) -> list[str]:
            # The tests of this unit, without the excluded ones and those a hung test
            # process already ran.
            return base + [x for e in excluded + done for x in ('--exclude', e)] + fulls

        t0 = time.time()
        with open(log, 'w') as logf:
            run = supervise.run_resuming(cmd_for, summary, sp, env, logf, log, echo,
                                         hang_after=hang_after)
        wall = time.time() - t0
        s = {'records': run.records, 'harness': (run.summary or {}).get('harness')}
        if run.attempts > 1 or run.summary is None:
            # The worker's own XML holds its last process only: the whole unit's, merged.
            write_junit(junit, short, run.records, wall)
            with open(summary, 'w') as f:
                json.dump(dict(s, wall=wall, hung_once=run.hung_once), f, indent=1)
        for test_id in run.hung_once:
            print('HUNG ONCE %s (see %s)' % (test_id, log), flush=True)
        counts = {'passed': 0, 'failed': 0, 'skipped': 0}
        for r in s['records']:
            counts[r['outcome']] += 1
        for k in totals:
            totals[k] += counts[k]
        rows.append((short, counts, wall, s.get('harness')))
        print('%s: %d passed, %d failed, %d skipped in %.1f s' % (
            short, counts['passed'], counts['failed'], counts['skipped'], wall), flush=True)
    print('== %s, %.1f s' % (mode, time.time() - t_all))
    for short, counts, wall, h in rows:
        extra = ''
        if h:
            extra = ' (rtrackd: %d spawns, %d restarts, %d refreshes; spawn %.1f s, ' \
                    'refresh %.1f s)' % (h['counts']['spawn'], h['counts']['restart'],
                                         h['counts']['refresh'], h['timings']['spawn'],
                                         h['timings']['refresh'])
        print('  %-40s %3d passed %3d failed %3d skipped %7.1f s%s' % (
            short, counts['passed'], counts['failed'], counts['skipped'], wall, extra))
    print('%d passed, %d failed, %d skipped' % (totals['passed'], totals['failed'],
                                                totals['skipped']))
    return 0 if totals['failed'] == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
