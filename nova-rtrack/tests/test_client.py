"""The Unix-socket client against a fake rtrackd: answers, typed errors, rtrackd down."""

from __future__ import annotations

import os
import unittest

from nova_rtrack import client as rt_client
from tests.fake_rtrackd import FakeRtrackd


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeRtrackd().start()
        self.addCleanup(self.fake.stop)
        self.client = rt_client.RtrackClient(self.fake.socket, timeout=2)

    def test_health_and_request_id(self) -> None:
        self.assertEqual('ok', self.client.health()['status'])
        self.client.request('GET', '/healthz', request_id='req-abc')
        self.client.request('GET', '/healthz', request_id='bad id with spaces')
        ids = [r['request_id'] for r in self.fake.calls('GET', '/healthz')]
        self.assertEqual('req-abc', ids[1])
        self.assertTrue(ids[2].startswith('req-'))

    def test_refused_is_typed_with_details(self) -> None:
        self.fake.refuse('POST', '/v1/claims', {'numa': {'reason': 'no cell fits'}})
        with self.assertRaises(rt_client.Refused) as cm:
            self.client.claim({'instance': {'uuid': 'x'}})
        self.assertEqual(409, cm.exception.status)
        self.assertEqual('claim_refused', cm.exception.code)
        self.assertEqual('no cell fits', cm.exception.details['numa']['reason'])

    def test_error_classes(self) -> None:
        cases = [(409, 'conflict', rt_client.Conflict), (404, 'not_found', rt_client.NotFound),
                 (400, 'invalid_request', rt_client.BadRequest),
                 (503, 'timeout', rt_client.Unavailable),
                 (500, 'store_failed', rt_client.Unavailable)]
        for status, code, cls in cases:
            self.fake.answer('GET', '/v1/usage', status,
                             {'error': {'code': code, 'message': 'm'}})
            with self.assertRaises(cls):
                self.client.usage()

    def test_abort_of_nothing_is_false(self) -> None:
        self.assertFalse(self.client.abort('nope'))

    def test_down_is_unavailable(self) -> None:
        self.fake.stop()
        with self.assertRaises(rt_client.Unavailable) as cm:
            self.client.health()
        self.assertIsNone(cm.exception.status)
        self.assertIn('unavailable', str(cm.exception))

    def test_no_socket_is_unavailable(self) -> None:
        c = rt_client.RtrackClient(os.path.join(self.fake.dir, 'missing.sock'))
        with self.assertRaises(rt_client.Unavailable):
            c.claims()

    def test_slow_is_unavailable(self) -> None:
        self.fake.delay = 0.5
        c = rt_client.RtrackClient(self.fake.socket, timeout=0.1)
        with self.assertRaises(rt_client.Unavailable):
            c.health()

    def test_refresh_missing_route(self) -> None:
        self.fake.routes = [r for r in self.fake.routes if r[1].pattern != '^/v1/refresh$']
        with self.assertRaises(rt_client.NotFound):
            self.client.refresh()


if __name__ == '__main__':
    unittest.main()
