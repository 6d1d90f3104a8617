"""rtrackd's local API over its Unix socket: HTTP/1.1 and JSON, stdlib only.

One connection per call (a Unix connect costs tens of microseconds; no pool to lock across
greenthreads). The socket is created through the ``socket`` module at call time, so under
eventlet's monkey patching every call yields while it waits.

Errors are typed: :class:`Refused` (409 ``claim_refused``), :class:`Conflict` (409 ``conflict``),
:class:`NotFound` (404), :class:`BadRequest` (4xx), :class:`Unavailable` (rtrackd down, slow,
5xx). The tracker turns all of them into Nova's exceptions.
"""

from __future__ import annotations

import http.client
import json
import socket
import uuid as uuid_mod
from typing import Any, Optional


class RtrackError(Exception):
    """An error answer of rtrackd, or no answer at all."""

    def __init__(self, message: str, status: Optional[int] = None,
                 code: Optional[str] = None,
                 details: Optional[dict[str, Any]] = None,
                 route: str = '') -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details = details or {}
        self.route = route

    def __str__(self) -> str:
        where = ' (%s)' % self.route if self.route else ''
        if self.status is None:
            return 'rtrackd unavailable%s: %s' % (where, self.message)
        return 'rtrackd answered %s %s%s: %s' % (
            self.status, self.code, where, self.message)


class Unavailable(RtrackError):
    """rtrackd is down, did not answer in time, or answered 5xx."""


class BadRequest(RtrackError):
    """4xx other than 404/409: the drop-in sent something rtrackd does not take."""


class NotFound(RtrackError):
    """404: no such claim, migration, instance, device or route."""


class Conflict(RtrackError):
    """409 ``conflict``."""


class Refused(RtrackError):
    """409 ``claim_refused``: it does not fit."""


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose transport is a Unix stream socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__('localhost', timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        # socket.socket is looked up now: eventlet's patched class when patched.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class RtrackClient:
    """A client of one rtrackd."""

    def __init__(self, socket_path: str, timeout: float = 20.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def __repr__(self) -> str:
        return 'RtrackClient(%r)' % self.socket_path

    # -- transport ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                request_id: Optional[str] = None,
                timeout: Optional[float] = None) -> tuple[int, Any]:
        """Sends one request; returns (status, decoded JSON or text) for 2xx, raises else."""
        route = '%s %s' % (method, path)
        headers = {'Accept': 'application/json', 'Connection': 'close'}
        if request_id:
            headers['X-Request-Id'] = _request_id(request_id)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
        conn = UnixHTTPConnection(self.socket_path,
                                  timeout if timeout is not None else self.timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
            ctype = resp.getheader('Content-Type') or ''
        except (OSError, http.client.HTTPException) as e:
            # Connection refused, no socket file, timeout, reset: rtrackd is not answering.
            raise Unavailable('%s: %s' % (type(e).__name__, e), route=route) from e
        finally:
            conn.close()
        if 'json' in ctype:
            try:
                payload: Any = json.loads(raw.decode() or 'null')
            except ValueError:
                payload = raw.decode(errors='replace')
        else:
            payload = raw.decode(errors='replace')
        if 200 <= status < 300:
            return status, payload
        raise _error(status, payload, route)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request('GET', path, **kw)[1]

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request('POST', path, body if body is not None else {}, **kw)[1]

    # -- routes ------------------------------------------------------------------------------

    def health(self, timeout: Optional[float] = None) -> dict[str, Any]:
        return self.get('/healthz', timeout=timeout)

    def compute_node(self, version: Optional[str] = None) -> dict[str, Any]:
        return self.get('/v1/compute-node' + ('?version=%s' % version if version else ''))

    def usage(self) -> dict[str, Any]:
        return self.get('/v1/usage')

    def inventory(self) -> dict[str, Any]:
        return self.get('/v1/inventory')

    def openapi(self) -> dict[str, Any]:
        return self.get('/v1/openapi.json')

    def claims(self) -> list[dict[str, Any]]:
        return self.get('/v1/claims')

    def get_claim(self, instance_uuid: str) -> Optional[dict[str, Any]]:
        try:
            return self.get('/v1/claims/%s' % instance_uuid)
        except NotFound:
            return None

    def claim(self, body: dict[str, Any], request_id: Optional[str] = None,
              dry_run: bool = False) -> tuple[int, dict[str, Any]]:
        path = '/v1/claims' + ('?dry_run=true' if dry_run else '')
        return self.request('POST', path, body, request_id=request_id)

    def abort(self, instance_uuid: str, request_id: Optional[str] = None) -> bool:
        """Aborts an instance's claim; False when there was none."""
        try:
            self.request('DELETE', '/v1/claims/%s' % instance_uuid, request_id=request_id)
        except NotFound:
            return False
        return True

    def migrations(self) -> list[dict[str, Any]]:
        return self.get('/v1/migrations')

    def get_migration(self, migration_id: int) -> Optional[dict[str, Any]]:
        try:
            return self.get('/v1/migrations/%d' % migration_id)
        except NotFound:
            return None

    def migrate(self, body: dict[str, Any], request_id: Optional[str] = None,
                dry_run: bool = False) -> tuple[int, dict[str, Any]]:
        path = '/v1/migrations' + ('?dry_run=true' if dry_run else '')
        return self.request('POST', path, body, request_id=request_id)

    def confirm(self, migration_id: int, request_id: Optional[str] = None) -> dict[str, Any]:
        return self.post('/v1/migrations/%d/confirm' % migration_id, request_id=request_id)

    def revert(self, migration_id: int, request_id: Optional[str] = None) -> dict[str, Any]:
        return self.post('/v1/migrations/%d/revert' % migration_id, request_id=request_id)

    def update_state(self, instance_uuid: str, changes: dict[str, Any],
                     request_id: Optional[str] = None) -> dict[str, Any]:
        return self.post('/v1/instances/%s/state' % instance_uuid, changes,
                         request_id=request_id)

    def attach_pci(self, instance_uuid: str, pci_requests: dict[str, Any],
                   request_id: Optional[str] = None) -> dict[str, Any]:
        return self.post('/v1/instances/%s/pci-requests' % instance_uuid,
                         {'pci_requests': pci_requests}, request_id=request_id)

    def detach_pci(self, instance_uuid: str, pci_request_id: str,
                   request_id: Optional[str] = None) -> None:
        self.request('DELETE', '/v1/instances/%s/pci-requests/%s' % (
            instance_uuid, pci_request_id), request_id=request_id)

    def pci_devices(self) -> list[dict[str, Any]]:
        body = self.get('/v1/pci-devices')
        return body.get('pci_devices', []) if isinstance(body, dict) else body

    def refresh(self, timeout: Optional[float] = None,
                disk_gb: Optional[dict[str, int]] = None) -> dict[str, Any]:
        """``POST /v1/refresh``: audit now, report now, answered after both; ``disk_gb``
        (``total``, ``used``, ``free`` in GiB) first, for ``[host] disk_source = "caller"``.

        Raises :class:`NotFound` (``no_such_route``) on an rtrackd that does not have it.
        """
        body: dict[str, Any] = {'disk_gb': disk_gb} if disk_gb else {}
        return self.post('/v1/refresh', body, timeout=timeout)


def _request_id(rid: str) -> str:
    ok = all(c.isalnum() or c in '-_.' for c in rid) and 0 < len(rid) <= 64
    return rid if ok else 'req-%s' % uuid_mod.uuid4()


def _error(status: int, payload: Any, route: str) -> RtrackError:
    code = None
    message = str(payload)[:500]
    details: dict[str, Any] = {}
    if isinstance(payload, dict) and isinstance(payload.get('error'), dict):
        err = payload['error']
        code = err.get('code')
        message = err.get('message') or message
        details = err.get('details') or {}
    if status >= 500:
        cls: type[RtrackError] = Unavailable
    elif status == 404:
        cls = NotFound
    elif status == 409 and code == 'claim_refused':
        cls = Refused
    elif status == 409:
        cls = Conflict
    else:
        cls = BadRequest
    return cls(message, status=status, code=code, details=details, route=route)
