"""One rtrackd per fake compute host of the running test.

The drop-in tracker asks its :class:`HarnessBinding` for its daemon at every
``update_available_resource``: the first time, a directory is made (tree, state, socket,
configuration, log), the tree is generated from the driver's view, the configuration derived
from nova.conf (``CONF`` as the test set it), and rtrackd is started; then at every periodic
the view and the configuration are derived again: a changed view is written (and audited), a
changed configuration restarts rtrackd on the same state directory (claims kept, as on a real
host). ``restart_compute_service`` builds a new tracker for the same host: it finds the same
daemon. Each daemon is stopped in the cleanup of the test that started it (registered when it
is spawned, after the Placement fixture, so it stops before the loopback server does), with an
``atexit`` backstop.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Optional

from oslo_log import log as logging

from nova_rtrack import client as rt_client
from nova_rtrack import conf as rt_conf
from nova_rtrack.testing import placement as loopback
from nova_rtrack.testing import sysfs

LOG = logging.getLogger(__name__)

RTRACKD = os.environ.get('RTRACKD', 'rtrackd')
# Tests replace tempfile.tempdir with their own temporary directories: the harness's files
# live under the process's TMPDIR as it was at import time.
TMP = os.environ.get('TMPDIR') or '/tmp'
KEEP = os.environ.get('RTRACK_KEEP') == '1'
PARITY = os.environ.get('RTRACK_PARITY', 'warn')   # 'warn', 'strict' or 'off'


class _State:
    current_test: Any = None
    placement_url: Optional[str] = None
    socket_dir: Optional[str] = None
    sockets = 0
    daemons: dict[tuple[str, str], 'Daemon'] = {}
    has_refresh: Optional[bool] = None
    base_dir: Optional[str] = None
    timings: dict[str, float] = {'spawn': 0.0, 'refresh': 0.0, 'generate': 0.0}
    counts: dict[str, int] = {'spawn': 0, 'refresh': 0, 'restart': 0}
    parity_log: Optional[str] = None


STATE = _State()


def base_dir() -> str:
    if STATE.base_dir is None:
        d = os.environ.get('RTRACK_HARNESS_DIR')
        if d:
            os.makedirs(d, exist_ok=True)
            STATE.base_dir = tempfile.mkdtemp(prefix='run-%d-' % os.getpid(), dir=d)
        else:
            STATE.base_dir = tempfile.mkdtemp(prefix='nova-rtrack-%d-' % os.getpid(), dir=TMP)
        STATE.parity_log = os.path.join(STATE.base_dir, 'parity.jsonl')
    return STATE.base_dir


# -- the current test ----------------------------------------------------------------------

def begin_test(test: Any) -> None:
    STATE.current_test = test
    STATE.placement_url = None


def end_test(test: Any) -> None:
    for key, d in list(STATE.daemons.items()):
        if d.test is test:
            d.stop()
            STATE.daemons.pop(key, None)
            d.cleanup_dir()
    if STATE.current_test is test:
        STATE.current_test = None
        STATE.placement_url = None


def set_placement_url(url: Optional[str]) -> None:
    STATE.placement_url = url


# -- the instances path ---------------------------------------------------------------------

def instances_dir() -> str:
    """rtrackd's instances path: DISK_GB comes from the driver's totals (``[host] disk_source =
    "caller"``, sent with every refresh), so any directory will do."""
    path = os.path.join(TMP, 'nova-rtrack-instances-%d' % os.getpid())
    os.makedirs(path, exist_ok=True)
    return path


def shutdown() -> None:
    """Stops every daemon (the worker exits with os._exit)."""
    for key, d in list(STATE.daemons.items()):
        d.stop()
        STATE.daemons.pop(key, None)
    if STATE.socket_dir is not None and not KEEP:
        shutil.rmtree(STATE.socket_dir, ignore_errors=True)


# -- one daemon ----------------------------------------------------------------------------

class DaemonError(Exception):
    pass


def socket_path() -> str:
    """A socket path far below the kernel's 107 bytes whatever the harness directory: the
    sockets live in a short directory of their own under /tmp (one per test process)."""
    if STATE.socket_dir is None:
        short = '/tmp' if os.access('/tmp', os.W_OK) else tempfile.gettempdir()
        STATE.socket_dir = tempfile.mkdtemp(prefix='rt', dir=short)
    STATE.sockets += 1
    return os.path.join(STATE.socket_dir, '%d.sock' % STATE.sockets)


class Daemon:
    def __init__(self, host: str, nodename: str, test: Any) -> None:
        self.host = host
        self.nodename = nodename
        self.test = test
        self.dir = tempfile.mkdtemp(prefix='%s-' % host, dir=base_dir())
        self.state_dir = os.path.join(self.dir, 'state')
        self.socket = socket_path()
        self.config_path = os.path.join(self.dir, 'rtrack.toml')
        self.log_path = os.path.join(self.dir, 'rtrackd.log')
        self.root_link = os.path.join(self.dir, 'root')
        os.makedirs(self.state_dir)
        self.proc: Optional[subprocess.Popen] = None
        self.config_text: Optional[str] = None
        self.view_digest: Optional[str] = None
        self.tree_gen = 0
        self.tree_dirty = False
        self.node_uuid: Optional[str] = None
        self.client = rt_client.RtrackClient(self.socket, timeout=30.0)
        self.short_audit = False

    def __repr__(self) -> str:
        return 'Daemon(%s/%s pid=%s)' % (self.host, self.nodename,
                                         self.proc.pid if self.proc else None)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # tree
    def set_view(self, view: dict[str, Any]) -> bool:
        digest = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()
        if digest == self.view_digest:
            return False
        t0 = time.time()
        self.tree_gen += 1
        new_root = os.path.join(self.dir, 'root.%d' % self.tree_gen)
        sysfs.write_tree(new_root, view)
        tmp_link = self.root_link + '.new'
        if os.path.lexists(tmp_link):
            os.unlink(tmp_link)
        os.symlink(os.path.basename(new_root), tmp_link)
        os.replace(tmp_link, self.root_link)
        old = os.path.join(self.dir, 'root.%d' % (self.tree_gen - 1))
        if os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)
        self.view_digest = digest
        self.tree_dirty = True
        STATE.timings['generate'] += time.time() - t0
        return True

    # configuration
    def set_config(self, text: str) -> bool:
        if text == self.config_text:
            return False
        with open(self.config_path + '.new', 'w') as f:
            f.write(text)
        os.replace(self.config_path + '.new', self.config_path)
        self.config_text = text
        return True

    def start(self) -> None:
        t0 = time.time()
        logf = open(self.log_path, 'ab')
        try:
            self.proc = subprocess.Popen(
                [RTRACKD, '--config', self.config_path], stdin=subprocess.DEVNULL,
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, RTRACK_LOG=os.environ.get('RTRACK_LOG', 'info')))
        finally:
            logf.close()
        atexit.register(self._kill_at_exit, self.proc)
        deadline = time.time() + 15
        while True:
            if self.proc.poll() is not None:
                raise DaemonError('rtrackd for %s exited with %s at start: %s' % (
                    self.host, self.proc.returncode, self.log_tail()))
            try:
                self.client.health(timeout=2)
                break
            except rt_client.RtrackError:
                if time.time() > deadline:
                    raise DaemonError('rtrackd for %s not ready after 15 s: %s' % (
                        self.host, self.log_tail()))
                time.sleep(0.01)
        self.tree_dirty = False   # the start audited the tree
        STATE.timings['spawn'] += time.time() - t0
        STATE.counts['spawn'] += 1

    @staticmethod
    def _kill_at_exit(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass

    def stop(self) -> None:
        if not self.running():
            return
        proc = self.proc
        try:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=2)
        except OSError:
            pass

    def restart(self) -> None:
        self.stop()
        STATE.counts['restart'] += 1
        self.start()

    def cleanup_dir(self) -> None:
        if not KEEP:
            shutil.rmtree(self.dir, ignore_errors=True)
            try:
                os.unlink(self.socket)
            except OSError:
                pass

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, errors='replace') as f:
                return ''.join(f.readlines()[-n:])
        except OSError:
            return '(no log)'

    # refresh
    def refresh(self, startup: bool,
                resources: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
        """Audit and report now; rtrackd's answer (None without ``POST /v1/refresh``)."""
        t0 = time.time()
        STATE.counts['refresh'] += 1
        try:
            if STATE.has_refresh is not False:
                try:
                    ans = self.client.refresh(
                        timeout=30, disk_gb=rt_conf.disk_totals(resources or {}))
                    STATE.has_refresh = True
                    pl = ans.get('placement') if isinstance(ans, dict) else None
                    if isinstance(pl, dict) and pl.get('error'):
                        LOG.warning('rtrackd %s: report failed: %s', self.host, pl)
                    self.tree_dirty = False
                    return ans if isinstance(ans, dict) else None
                except rt_client.NotFound:
                    STATE.has_refresh = False
                except rt_client.Unavailable as e:
                    LOG.warning('rtrackd %s refresh: %s', self.host, e)
                    return None
            self._refresh_fallback(startup)
            return None
        finally:
            STATE.timings['refresh'] += time.time() - t0

    def _refresh_fallback(self, startup: bool) -> None:
        """Without POST /v1/refresh: audit every second (set in the configuration), wait for
        two audits after a tree change, and poll Placement until it holds the inventory."""
        if self.tree_dirty:
            mark = self.client.health().get('audits_succeeded', 0)
            deadline = time.time() + 10
            while self.client.health().get('audits_succeeded', 0) < mark + 2:
                if time.time() > deadline:
                    LOG.warning('rtrackd %s did not audit within 10 s', self.host)
                    break
                time.sleep(0.05)
            self.tree_dirty = False
        self.wait_placement(timeout=10 if startup else 5)

    def wait_placement(self, timeout: float) -> bool:
        url = STATE.placement_url
        if not url or not self.node_uuid:
            return False
        deadline = time.time() + timeout
        while True:
            try:
                want = self.client.usage().get('resources', {})
            except rt_client.RtrackError:
                want = {}
            status, body = loopback.get_json(
                url, '/resource_providers/%s/inventories' % self.node_uuid)
            if status == 200 and body is not None:
                have = body.get('inventories', {})
                if all(have.get(rc, {}).get('total') == v.get('total') and
                       have.get(rc, {}).get('reserved') == v.get('reserved')
                       for rc, v in want.items() if v.get('total')):
                    return True
            if time.time() > deadline:
                LOG.warning('Placement does not show rtrackd %s inventory after %.0f s',
                            self.host, timeout)
                return False
            time.sleep(0.05)


# -- configuration -------------------------------------------------------------------------

def _freeze_start_options(tracker: Any, derived: dict[str, Any]) -> None:
    """Options Nova reads once, when the compute service starts (the libvirt driver's
    ``supported_vgpu_types`` and ``[mdev_*]`` mappings in its ``__init__``, the vPMEM
    namespaces in ``init_host``, the PciDevTracker's ``[pci] device_spec``), keep the value they had then for this tracker (one per
    service start). The functional tests share one CONF between their computes and change
    these options before restarting one compute only; the others keep what they started with.
    """
    frozen = getattr(tracker, '_harness_start_options', None)
    if frozen is None:
        devices = derived.get('devices') or {}
        frozen = {
            'enabled_mdev_types': devices.get('enabled_mdev_types'),
            'pmem_namespaces': devices.get('pmem_namespaces'),
            'mdev': derived.get('mdev'),
            'device_spec': (derived.get('pci') or {}).get('device_spec'),
        }
        tracker._harness_start_options = frozen
    devices = dict(derived.get('devices') or {})
    for key in ('enabled_mdev_types', 'pmem_namespaces'):
        devices.pop(key, None)
        if frozen[key]:
            devices[key] = frozen[key]
    derived.pop('devices', None)
    if devices:
        derived['devices'] = devices
    derived.pop('mdev', None)
    if frozen['mdev']:
        derived['mdev'] = frozen['mdev']
    pci = dict(derived.get('pci') or {})
    pci.pop('device_spec', None)
    if frozen['device_spec']:
        pci['device_spec'] = frozen['device_spec']
    derived.pop('pci', None)
    if pci:
        derived['pci'] = pci


def harness_config(daemon: Daemon, tracker: Any, nodename: str,
                   resources: dict[str, Any], short_audit: bool) -> str:
    from nova import conf as nova_conf
    CONF = nova_conf.CONF
    derived = rt_conf.derive(CONF, host=tracker.host, hypervisor_hostname=nodename,
                             compute_node_uuid=resources['uuid'], include_placement=False)
    _freeze_start_options(tracker, derived)
    over: dict[str, Any] = {
        'host': {
            'root': daemon.root_link,
            'state_dir': daemon.state_dir,
            'instances_path': instances_dir(),
            'disk_source': 'caller',
            'hypervisor_type': resources.get('hypervisor_type') or 'QEMU',
        },
        'api': {'socket': daemon.socket, 'socket_mode': '0600', 'socket_group': 'root',
                'request_timeout_s': 30},
        'audit': {'interval_s': 1 if short_audit else 3600},
        'log': {'level': 'info'},
    }
    service = getattr(tracker, 'service_ref', None)
    if service is not None and 'id' in service and service.id is not None:
        over['host']['service_id'] = int(service.id)
    if STATE.placement_url:
        over['placement'] = {
            'endpoint': STATE.placement_url,
            'auth': 'noauth',
            'token': 'admin',
            'roles': 'admin,service',
            # Every report is asked for by POST /v1/refresh (nova-compute's periodic); the
            # old binaries without it report every second and the harness polls Placement.
            'report_interval_s': 1 if short_audit else 3600,
            'refresh_interval_s': 3600,
            'timeout_s': 10,
            # nova-compute's virt driver sets the hypervisor traits, Nova's scheduler the
            # allocations (as in production: conf.required_under_nova_compute).
            'hypervisor_traits': 'nova-compute',
            'report_allocations': False,
        }
    derived.pop('audit', None)
    cfg = rt_conf.merge(derived, over)
    return rt_conf.dumps_toml(cfg)


# -- parity --------------------------------------------------------------------------------

def parity(daemon: Daemon, resources: dict[str, Any]) -> list[str]:
    """Differences between rtrackd's ComputeNode and the driver's view (one line each)."""
    diffs: list[str] = []
    try:
        rcn = daemon.client.compute_node()['nova_object.data']
    except rt_client.RtrackError as e:
        return ['cannot read the ComputeNode: %s' % e]
    for key in ('memory_mb', 'local_gb'):
        if rcn.get(key) != resources.get(key):
            diffs.append('%s: rtrack %s, driver %s' % (key, rcn.get(key), resources.get(key)))
    try:
        rt_cells = _cells(json.loads(rcn['numa_topology']))
        drv_cells = _cells(json.loads(resources['numa_topology']))
    except (TypeError, ValueError, KeyError):
        return diffs
    for cid in sorted(set(rt_cells) | set(drv_cells)):
        a, b = rt_cells.get(cid), drv_cells.get(cid)
        if a != b:
            for k in sorted(set(a or {}) | set(b or {})):
                if (a or {}).get(k) != (b or {}).get(k):
                    diffs.append('cell %s %s: rtrack %s, driver %s' % (
                        cid, k, (a or {}).get(k), (b or {}).get(k)))
    return diffs


def _cells(topo: dict[str, Any]) -> dict[int, dict[str, Any]]:
    out = {}
    for c in topo['nova_object.data']['cells']:
        d = c['nova_object.data']
        out[d['id']] = {
            'cpuset': sorted(d.get('cpuset', [])),
            'pcpuset': sorted(d.get('pcpuset', [])),
            'siblings': sorted(sorted(s) for s in d.get('siblings', [])),
            'memory': d.get('memory'),
            'mempages': sorted((m['nova_object.data']['size_kb'],
                                m['nova_object.data']['total'],
                                m['nova_object.data'].get('reserved', 0))
                               for m in d.get('mempages', [])),
        }
    return out


def _record_parity(daemon: Daemon, diffs: list[str]) -> None:
    test_id = daemon.test.id() if daemon.test is not None else None
    base_dir()
    with open(STATE.parity_log, 'a') as f:
        f.write(json.dumps({'test': test_id, 'host': daemon.host, 'diffs': diffs}) + '\n')
    LOG.warning('rtrackd %s differs from the driver: %s', daemon.host, '; '.join(diffs))
    if PARITY == 'strict':
        raise DaemonError('host-fact parity: %s' % '; '.join(diffs))


# -- the binding ---------------------------------------------------------------------------

def _tracker_binding_base() -> type:
    from nova_rtrack import tracker as rt_tracker
    return rt_tracker.DaemonBinding


class HarnessBindingMixin:
    tracker: Any

    def _daemon(self, nodename: str) -> Optional[Daemon]:
        return STATE.daemons.get((self.tracker.host, nodename))

    def client(self, nodename: str) -> rt_client.RtrackClient:
        d = self._daemon(nodename)
        if d is None:
            return rt_client.RtrackClient(os.path.join(base_dir(), 'no-daemon.sock'))
        return d.client

    def prepare(self, context: Any, nodename: str, resources: dict[str, Any],
                startup: bool) -> None:
        key = (self.tracker.host, nodename)
        d = STATE.daemons.get(key)
        test = STATE.current_test
        if d is None:
            d = Daemon(self.tracker.host, nodename, test)
            # Current rtrackd has POST /v1/refresh: long intervals, every audit and report
            # asked for. An old binary without it is found at its first start (below).
            d.short_audit = STATE.has_refresh is False
            STATE.daemons[key] = d
            if test is not None:
                test.addCleanup(_stop_daemon, key, d)
        d.node_uuid = resources['uuid']
        t0 = time.time()
        d.set_view(sysfs.host_view(self.tracker.driver, resources))
        STATE.timings['generate'] += 0  # (counted in set_view)
        cfg_changed = d.set_config(harness_config(d, self.tracker, nodename, resources,
                                                  d.short_audit))
        if not d.running():
            d.start()
            if STATE.has_refresh is None:
                try:
                    paths = d.client.openapi().get('paths', {})
                    STATE.has_refresh = '/v1/refresh' in paths
                except rt_client.RtrackError:
                    STATE.has_refresh = False
                if not STATE.has_refresh and not d.short_audit:
                    # An rtrackd without the route: audit and report every second, and poll.
                    d.short_audit = True
                    d.set_config(harness_config(d, self.tracker, nodename, resources, True))
                    d.restart()
        elif cfg_changed:
            LOG.info('rtrackd %s: configuration changed, restarting', d.host)
            d.restart()
        del t0
        self.tracker.note_refresh(nodename, d.refresh(startup, resources))
        if PARITY != 'off':
            diffs = parity(d, resources)
            if diffs:
                _record_parity(d, diffs)

    def startup_check(self) -> None:
        """The harness derives rtrackd's configuration from nova.conf: nothing to compare."""

    def stop(self) -> None:
        pass


def _stop_daemon(key: tuple[str, str], d: Daemon) -> None:
    d.stop()
    if STATE.daemons.get(key) is d:
        STATE.daemons.pop(key, None)
    d.cleanup_dir()


def binding_factory(tracker: Any) -> Any:
    base = _tracker_binding_base()
    cls = type('HarnessBinding', (HarnessBindingMixin, base), {})
    return cls(tracker)


def stats() -> dict[str, Any]:
    return {'timings': dict(STATE.timings), 'counts': dict(STATE.counts),
            'has_refresh': STATE.has_refresh, 'parity_log': STATE.parity_log}
