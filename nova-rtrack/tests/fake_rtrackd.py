"""A fake rtrackd: HTTP/1.1 JSON on a temporary Unix socket, with programmable answers.

Good enough to unit-test the client and the drop-in tracker: each route is a function of the
decoded body returning (status, body); every request is recorded.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import tempfile
import time

try:
    # Under eventlet's monkey patching (Nova's unit tests) threads are greenthreads and
    # sockets green: the fake serves from a real OS thread with the original socket module,
    # so that the client under test (green) really waits on it.
    from eventlet import patcher as _patcher
    threading = _patcher.original('threading')
    _socket = _patcher.original('socket')
    _time = _patcher.original('time')
except ImportError:  # pragma: no cover
    import socket as _socket
    import threading
    _time = time
from typing import Any, Callable, Optional

Handler = Callable[[dict[str, Any], 'Match'], tuple[int, Any]]
Match = re.Match


class _Server:
    """Accepts on a Unix socket in a real thread; one request per connection."""

    def __init__(self, path: str, handler: Any) -> None:
        self.handler = handler
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.stopped = False

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except (_socket.timeout, OSError):
                continue
            conn.settimeout(10)
            try:
                self.handler(conn, ('fake', 0), self)
            except Exception:  # noqa
                pass
            finally:
                try:
                    conn.close()
                except OSError:
                    pass

    def shutdown(self) -> None:
        self.stopped = True

    def server_close(self) -> None:
        self.sock.close()


class FakeRtrackd:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix='fake-rtrackd-')
        self.socket = os.path.join(self.dir, 'rtrack.sock')
        self.routes: list[tuple[str, re.Pattern, Handler]] = []
        self.requests: list[dict[str, Any]] = []
        self.delay = 0.0
        self.claims: dict[str, dict[str, Any]] = {}
        self.migrations: dict[int, dict[str, Any]] = {}
        self.node = compute_node_primitive()
        self._server: Optional[_Server] = None
        self._install_defaults()

    # -- programming -------------------------------------------------------------------------

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.insert(0, (method, re.compile('^%s$' % pattern), handler))

    def answer(self, method: str, pattern: str, status: int, body: Any) -> None:
        self.route(method, pattern, lambda b, m: (status, body))

    def refuse(self, method: str, pattern: str, details: dict[str, Any],
               message: str = 'does not fit') -> None:
        self.answer(method, pattern, 409, {'error': {
            'code': 'claim_refused', 'message': message, 'details': details}})

    def calls(self, method: Optional[str] = None, path: Optional[str] = None) -> list:
        return [r for r in self.requests
                if (method is None or r['method'] == method) and
                (path is None or re.match('^%s$' % path, r['path']))]

    # -- the default behaviour: a tiny tracker ---------------------------------------------

    def _install_defaults(self) -> None:
        self.answer('GET', '/healthz', 200, {'status': 'ok', 'audits_succeeded': 1})
        self.route('GET', '/v1/compute-node', lambda b, m: (200, self.node))
        self.route('GET', '/v1/claims', lambda b, m: (200, list(self.claims.values())))
        self.route('GET', '/v1/claims/(?P<u>[^/]+)', self._get_claim)
        self.route('POST', '/v1/claims', self._claim)
        self.route('DELETE', '/v1/claims/(?P<u>[^/]+)', self._abort)
        self.route('GET', '/v1/migrations', lambda b, m: (200, list(self.migrations.values())))
        self.route('GET', '/v1/migrations/(?P<i>\\d+)', self._get_migration)
        self.route('POST', '/v1/migrations', self._migrate)
        self.route('POST', '/v1/migrations/(?P<i>\\d+)/(?P<op>confirm|revert)', self._finish)
        self.route('POST', '/v1/instances/(?P<u>[^/]+)/state', self._state)
        self.answer('GET', '/v1/pci-devices', 200, {'pci_devices': []})
        self.answer('POST', '/v1/refresh', 200, {'audited': True, 'placement': None})

    def _get_claim(self, body: dict, m: Match) -> tuple[int, Any]:
        c = self.claims.get(m.group('u'))
        return (200, c) if c else (404, {'error': {'code': 'not_found', 'message': 'no'}})

    def _claim(self, body: dict, m: Match) -> tuple[int, Any]:
        data = body['request_spec']['nova_object.data']
        uuid = body['instance']['uuid']
        if uuid in self.claims:
            return 200, dict(self.claims[uuid], existing=True)
        flavor = data['flavor']['nova_object.data']
        ans = claim_answer(uuid, flavor)
        self.claims[uuid] = ans
        return 201, ans

    def _abort(self, body: dict, m: Match) -> tuple[int, Any]:
        if self.claims.pop(m.group('u'), None) is None:
            return 404, {'error': {'code': 'not_found', 'message': 'no claim'}}
        return 200, {}

    def _get_migration(self, body: dict, m: Match) -> tuple[int, Any]:
        mig = self.migrations.get(int(m.group('i')))
        return (200, mig) if mig else (404, {'error': {'code': 'not_found', 'message': 'no'}})

    def _migrate(self, body: dict, m: Match) -> tuple[int, Any]:
        mid = body.get('migration_id') or (len(self.migrations) + 1)
        flavor = body['request_spec']['nova_object.data']['flavor']['nova_object.data']
        mig = {'id': mid, 'uuid': body.get('migration_uuid'),
               'instance_uuid': body['instance']['uuid'],
               'source_compute': body.get('source_compute'),
               'source_node': body.get('source_node'),
               'dest_compute': body.get('dest_compute'), 'dest_node': body.get('dest_node'),
               'status': 'pre-migrating', 'migration_type': body.get('move_type')}
        self.migrations[mid] = mig
        return 201, {'migration': mig,
                     'claim': claim_answer(body['instance']['uuid'], flavor, mid)}

    def _finish(self, body: dict, m: Match) -> tuple[int, Any]:
        mig = self.migrations.get(int(m.group('i')))
        if not mig:
            return 404, {'error': {'code': 'not_found', 'message': 'no migration'}}
        mig['status'] = 'confirmed' if m.group('op') == 'confirm' else 'reverted'
        return 200, {'migration': mig}

    def _state(self, body: dict, m: Match) -> tuple[int, Any]:
        uuid = m.group('u')
        if uuid not in self.claims:
            return 404, {'error': {'code': 'not_found', 'message': 'no instance'}}
        if body.get('vm_state') == 'deleted':
            self.claims.pop(uuid)
            return 200, {'instance': None}
        return 200, {'instance': {'uuid': uuid}}

    # -- serving -----------------------------------------------------------------------------

    def start(self) -> 'FakeRtrackd':
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *a: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get('Content-Length') or 0)
                raw = self.rfile.read(n) if n else b''
                body = json.loads(raw) if raw else {}
                path = self.path.split('?')[0]
                fake.requests.append({'method': self.command, 'path': path,
                                      'query': self.path.partition('?')[2],
                                      'body': body,
                                      'request_id': self.headers.get('X-Request-Id')})
                if fake.delay:
                    _time.sleep(fake.delay)
                for method, pat, handler in fake.routes:
                    m = pat.match(path)
                    if method == self.command and m:
                        status, out = handler(body, m)
                        break
                else:
                    status, out = 404, {'error': {'code': 'no_such_route', 'message': path}}
                data = json.dumps(out).encode()
                try:
                    self.send_response(status)
                    self.send_header('Content-Type', 'application/json')
                    self.send_header('Content-Length', str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            do_GET = do_POST = do_DELETE = _handle

        self._server = _Server(self.socket, H)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._thread.join(2)
            self._server.server_close()
            self._server = None
        # The socket's directory is the fake's own: remove it with whatever is in it.
        shutil.rmtree(self.dir, ignore_errors=True)


def numa_primitive(host_cell: int, pins: dict[int, int]) -> dict[str, Any]:
    return {
        'nova_object.name': 'InstanceNUMATopology', 'nova_object.namespace': 'nova',
        'nova_object.version': '1.3',
        'nova_object.data': {'cells': [{
            'nova_object.name': 'InstanceNUMACell', 'nova_object.namespace': 'nova',
            'nova_object.version': '1.6',
            'nova_object.data': {
                'id': host_cell, 'cpuset': [], 'pcpuset': sorted(pins),
                'cpuset_reserved': None, 'memory': 512, 'pagesize': None,
                'cpu_pinning_raw': {str(k): v for k, v in pins.items()},
                'cpu_policy': 'dedicated', 'cpu_thread_policy': None}}],
            'emulator_threads_policy': None}}


def claim_answer(uuid: str, flavor: dict[str, Any],
                 migration_id: Optional[int] = None) -> dict[str, Any]:
    dedicated = flavor.get('extra_specs', {}).get('hw:cpu_policy') == 'dedicated'
    numa = numa_primitive(1, {i: 4 + i for i in range(flavor['vcpus'])}) if dedicated else None
    return {'instance_uuid': uuid, 'migration_id': migration_id,
            'resources': {'VCPU': flavor['vcpus'], 'MEMORY_MB': flavor['memory_mb']},
            'pci_devices': [], 'flavor': flavor, 'is_bfv': False, 'mdevs': [], 'nested': [],
            'numa_cells': [1] if dedicated else [], 'numa_topology': numa,
            'claimed_at': '2026-01-01T00:00:00Z', 'existing': False, 'dry_run': False}


def compute_node_primitive(uuid: str = '9d3a1b2c-0000-4000-8000-000000000001',
                           memory_mb_used: int = 512) -> dict[str, Any]:
    return {
        'nova_object.name': 'ComputeNode', 'nova_object.namespace': 'nova',
        'nova_object.version': '1.19',
        'nova_object.data': {
            'uuid': uuid, 'host': 'compute1', 'hypervisor_hostname': 'compute1',
            'vcpus': 8, 'memory_mb': 16384, 'local_gb': 128, 'vcpus_used': 0,
            'memory_mb_used': memory_mb_used, 'local_gb_used': 0, 'free_ram_mb': 15872,
            'free_disk_gb': 128, 'running_vms': 0, 'current_workload': 0,
            'hypervisor_type': 'rtrack', 'hypervisor_version': 1000, 'cpu_info': '{}',
            'disk_available_least': 100, 'metrics': '[]', 'stats': {},
            'host_ip': None, 'numa_topology': None,
            'supported_hv_specs': [],
            'pci_device_pools': {'nova_object.name': 'PciDevicePoolList',
                                 'nova_object.namespace': 'nova',
                                 'nova_object.version': '1.1',
                                 'nova_object.data': {'objects': []}},
            'cpu_allocation_ratio': 4.0, 'ram_allocation_ratio': 1.0,
            'disk_allocation_ratio': 1.0, 'mapped': 0, 'service_id': None,
            'created_at': None, 'updated_at': None, 'deleted_at': None, 'deleted': False}}
