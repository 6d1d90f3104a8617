"""The Placement fixture's application served on 127.0.0.1, for rtrackd.

Nova's ``PlacementFixture`` intercepts Placement in-process (wsgi-intercept). rtrackd is
another process: it needs a real socket. The very same application object (same database)
is served by a threaded WSGI server on a loopback port; under eventlet its threads are
greenthreads, which run whenever the test waits on a socket (every rtrackd call does).
"""

from __future__ import annotations

import http.client
import json
import socketserver
import threading
import urllib.parse
from typing import Any, Optional
from wsgiref import simple_server


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def serve_intercepted(endpoint: str) -> tuple[str, Any]:
    """Serves the app wsgi-intercept holds for ``endpoint``; returns (url, stop)."""
    import wsgi_intercept

    u = urllib.parse.urlparse(endpoint)
    app_fn, _script = wsgi_intercept._wsgi_intercept[(u.hostname, u.port or 80)]
    app = app_fn()
    srv = simple_server.make_server('127.0.0.1', 0, app, server_class=_Server,
                                    handler_class=_Quiet)
    th = threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05},
                          daemon=True, name='placement-loopback')
    th.start()

    def stop() -> None:
        srv.shutdown()
        srv.server_close()

    return 'http://127.0.0.1:%d' % srv.server_port, stop


def get_json(url: str, path: str, timeout: float = 5.0) -> tuple[int, Optional[dict]]:
    """One GET to Placement as admin (the loopback server), for the harness's checks."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request('GET', path, headers={
            'x-auth-token': 'admin', 'x-roles': 'admin',
            'OpenStack-API-Version': 'placement 1.39', 'Accept': 'application/json'})
        resp = conn.getresponse()
        body = resp.read()
        try:
            return resp.status, json.loads(body or b'null')
        except ValueError:
            return resp.status, None
    finally:
        conn.close()
