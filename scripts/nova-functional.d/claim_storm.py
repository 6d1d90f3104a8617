#!/usr/bin/env python3
"""A claim storm through nova-compute, with Nova's own tracker or with rtrack's (a benchmark,
not a test; scripts/bench-nova-compute.sh runs it both ways and prints them side by side).

    claim_storm.py --tracker nova|rtrack [--builds 200] [--concurrency 8]
                   [--flavor plain|pinned] [--rtrackd BIN] [--out FILE.json]

Runs inside the venv scripts/nova-functional builds (nova 34.0.0 and its test requirements),
from Nova's own functional test fixtures, as Nova's libvirt functional tests do
(``nova.tests.functional.libvirt.base.ServersTestBase``): the API, conductor and scheduler
services, Placement (in-process), the Neutron and Glance fixtures and one compute service on
fake libvirt (2 NUMA cells, 12 CPUs, 16 GiB). With ``--tracker rtrack`` the harness of
nova-rtrack (``nova_rtrack.testing.hook``) replaces the tracker with nova-rtrack's and backs the
host with its own rtrackd, exactly as scripts/nova-functional does.

RPC casts stay casts (``CAST_AS_CALL = False``), so builds run concurrently in nova-compute as
in production. The driver keeps ``--concurrency`` servers in existence: it creates servers until
that many exist, deletes each one as soon as it is ACTIVE, and creates the next once a deletion
is done, until ``--builds`` servers have been built and deleted. Every call of the tracker's
``instance_claim`` (the drop-in's or Nova's, wrapped on the class) is timed twice: from entry to
return (what a build waits: the fair ``compute_resources`` lock, which both trackers take, is
included) and inside that lock (the tracker's own work: Nova's in-process accounting, ComputeNode
save and Placement update, or the drop-in's calls to rtrackd and the ComputeNode save). The
tracker's ``update_usage`` (called when a server is deleted, among others) is timed the same
way. Prints one JSON document (and writes it to --out): counts, p50/p90/p99/max of each,
build time (POST to ACTIVE) and the storm's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(REPO, 'nova-rtrack')

ARGS: argparse.Namespace
RESULT: dict[str, Any] = {}


def pct(values: list[float], p: float) -> float:
    if not values:
        return float('nan')
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def summary(values: list[float]) -> dict[str, Any]:
    return {'n': len(values),
            'p50_ms': round(pct(values, 50) * 1000, 2),
            'p90_ms': round(pct(values, 90) * 1000, 2),
            'p99_ms': round(pct(values, 99) * 1000, 2),
            'max_ms': round(max(values) * 1000, 2) if values else None,
            'mean_ms': round(sum(values) / len(values) * 1000, 2) if values else None}


def make_case() -> type:
    # Imported here, the functional tests' package first: it monkey-patches (eventlet) when
    # imported, which must come before the rest of Nova, and after the hook (rtrack mode).
    from nova.tests.functional.libvirt import base
    from nova import utils
    from nova.compute import resource_tracker
    from nova.tests.fixtures import libvirt as fakelibvirt

    class ClaimStorm(base.ServersTestBase):
        ADMIN_API = True
        CAST_AS_CALL = False
        microversion = 'latest'
        ADDITIONAL_FILTERS = ['NUMATopologyFilter']

        def _timed(self, cls: Any, name: str, total: list[float], held: list[float]) -> None:
            """Times ``cls.name`` from entry to return (``total``: the lock wait included) and
            inside Nova's ``compute_resources`` lock (``held``: the tracker's own work), by
            wrapping the undecorated method in the same fair named lock again."""
            # Where it is defined: the class itself (Nova's), or one of its bases (the drop-in's
            # methods are on its mixins, nova_rtrack/tracker/).
            owner = next(c for c in cls.__mro__ if name in c.__dict__)
            orig = owner.__dict__[name]
            inner = getattr(orig, '__wrapped__', None)

            def timed_inner(tracker: Any, *a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return inner(tracker, *a, **k)
                finally:
                    held.append(time.perf_counter() - t0)
            locked = (utils.synchronized(resource_tracker.COMPUTE_RESOURCE_SEMAPHORE,
                                         fair=True)(timed_inner)
                      if inner is not None else orig)

            def timed(tracker: Any, *a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return locked(tracker, *a, **k)
                finally:
                    total.append(time.perf_counter() - t0)
            setattr(cls, name, timed)
            if owner is cls:
                self.addCleanup(setattr, cls, name, orig)
            else:
                self.addCleanup(delattr, cls, name)

        def test_storm(self) -> None:
            a = ARGS
            if a.flavor == 'pinned':
                self.flags(cpu_dedicated_set='0-11', cpu_shared_set=None, group='compute')
                extra = {'hw:cpu_policy': 'dedicated'}
            else:
                extra = None
            self.flags(max_concurrent_builds=max(10, a.concurrency))
            # The tracker class as nova-compute will build it (the drop-in, in rtrack mode).
            rt_cls = resource_tracker.ResourceTracker
            claims: list[float] = []
            claims_held: list[float] = []
            usage: list[float] = []
            usage_held: list[float] = []
            self._timed(rt_cls, 'instance_claim', claims, claims_held)
            self._timed(rt_cls, 'update_usage', usage, usage_held)

            self.start_compute('storm1', host_info=fakelibvirt.HostInfo(
                cpu_nodes=2, cpu_sockets=1, cpu_cores=3, cpu_threads=2,
                kB_mem=16 * 1024 * 1024))
            tracker_name = '%s.%s' % (
                type(self.computes['storm1'].manager.rt).__module__,
                type(self.computes['storm1'].manager.rt).__name__)
            flavor = self._create_flavor(memory_mb=512, vcpu=1, disk=1, ephemeral=0,
                                         extra_spec=extra)
            body = self._build_server(flavor_id=flavor, networks='none')

            posted: dict[str, float] = {}    # server id -> POST time
            deleting: set[str] = set()
            build_times: list[float] = []
            errors: list[str] = []
            created = done = 0
            t_start = time.perf_counter()
            deadline = time.time() + a.timeout
            while done < a.builds:
                if time.time() > deadline:
                    self.fail('storm did not finish in %d s: %d of %d done' % (
                        a.timeout, done, a.builds))
                while created < a.builds and len(posted) + len(deleting) < a.concurrency:
                    b = dict(body, name='storm-%04d' % created)
                    s = self.api.post_server({'server': b})
                    posted[s['id']] = time.perf_counter()
                    created += 1
                time.sleep(a.poll)
                servers = {s['id']: s for s in self.api.get_servers(detail=True)}
                for sid in list(posted):
                    s = servers.get(sid)
                    if s is None:
                        continue
                    if s['status'] == 'ACTIVE':
                        build_times.append(time.perf_counter() - posted.pop(sid))
                        self.api.delete_server(sid)
                        deleting.add(sid)
                    elif s['status'] == 'ERROR':
                        errors.append('%s: %s' % (sid, s.get('fault', {}).get('message')))
                        posted.pop(sid)
                        self.api.delete_server(sid)
                        deleting.add(sid)
                for sid in list(deleting):
                    if sid not in servers:
                        deleting.discard(sid)
                        done += 1
            wall = time.perf_counter() - t_start
            RESULT.update({
                'tracker': a.tracker,
                'tracker_class': tracker_name,
                'flavor': a.flavor,
                'builds': a.builds,
                'concurrency': a.concurrency,
                'errors': errors,
                'wall_s': round(wall, 2),
                'builds_per_s': round(a.builds / wall, 2),
                'instance_claim': summary(claims),
                'instance_claim_in_lock': summary(claims_held),
                'update_usage': summary(usage),
                'update_usage_in_lock': summary(usage_held),
                'build_post_to_active': summary(build_times),
            })
            self.assertEqual([], errors)

    return ClaimStorm


def main() -> int:
    global ARGS
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--tracker', choices=('nova', 'rtrack'), required=True)
    p.add_argument('--builds', type=int, default=200)
    p.add_argument('--concurrency', type=int, default=8)
    p.add_argument('--flavor', choices=('plain', 'pinned'), default='plain')
    p.add_argument('--poll', type=float, default=0.05, help='seconds between API polls')
    p.add_argument('--timeout', type=int, default=900)
    p.add_argument('--rtrackd', default=os.environ.get('RTRACKD'))
    p.add_argument('--out')
    ARGS = p.parse_args()
    import signal
    from nova_rtrack.testing.worker import dump_stacks  # the venv has the package
    signal.signal(signal.SIGUSR1, dump_stacks)

    if ARGS.tracker == 'rtrack':
        if not ARGS.rtrackd:
            p.error('--rtrackd (or RTRACKD) is needed with --tracker rtrack')
        os.environ['RTRACKD'] = os.path.abspath(ARGS.rtrackd)   # (the cwd changes below)
        os.environ.setdefault('RTRACK_HARNESS_DIR',
                              os.path.join(REPO, 'target', 'nova-functional', 'bench-harness'))
        # The package's source tree first, as nova-rtrack/run-functional.py does.
        sys.path.insert(0, PKG)
        from nova_rtrack.testing import hook
        hook.install()
    # Nova's API fixture reads etc/nova/api-paste.ini relative to site-packages.
    import sysconfig
    os.chdir(sysconfig.get_paths()['purelib'])

    case = make_case()
    suite = unittest.TestSuite([case('test_storm')])
    res = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(suite)
    if ARGS.tracker == 'rtrack':
        from nova_rtrack.testing import launcher
        launcher.shutdown()
    RESULT['ok'] = res.wasSuccessful()
    text = json.dumps(RESULT, indent=1)
    print(text, flush=True)
    if ARGS.out:
        with open(ARGS.out, 'w') as f:
            f.write(text + '\n')
    os._exit(0 if res.wasSuccessful() else 1)


if __name__ == '__main__':
    main()
