"""How the tracker reaches its rtrackd: :class:`DaemonBinding` (production: nova.conf's
``[rtrack] socket``; the test harness subclasses it).

The factory that builds it (``set_binding_factory``) stays in ``nova_rtrack.tracker`` itself,
where the tracker's ``__init__`` reads it and where the harness and the tests set it.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from nova import exception

from nova_rtrack import client as rt_client
from nova_rtrack import conf as rt_conf
from nova_rtrack.tracker.common import CONF
from nova_rtrack.tracker.common import LOG

if TYPE_CHECKING:
    from nova_rtrack.tracker import RtrackResourceTracker


class DaemonBinding:
    """Where the tracker's rtrackd is, and what to do before each audit.

    Production: the socket of nova.conf's ``[rtrack] socket``. The test harness installs its
    own (one rtrackd per fake host, its tree generated from the driver's view).
    """

    def __init__(self, tracker: 'RtrackResourceTracker') -> None:
        self.tracker = tracker
        self._checked = False
        self._refresh_missing_logged = False

    def client(self, nodename: str) -> rt_client.RtrackClient:
        return rt_client.RtrackClient(CONF.rtrack.socket, timeout=CONF.rtrack.timeout)

    def startup_check(self) -> None:
        """At construction (service start): nova.conf and rtrack.toml must agree."""
        if not self._checked:
            self.check_config()
            self._checked = True

    def prepare(self, context: Any, nodename: str, resources: dict[str, Any],
                startup: bool) -> None:
        """Called at every update_available_resource before the ComputeNode is read."""
        if CONF.rtrack.refresh_on_periodic or startup:
            self.refresh(nodename)

    def check_config(self) -> None:
        if not CONF.rtrack.check_config:
            return
        try:
            problems = rt_conf.check_file(CONF, CONF.rtrack.config_file)
        except FileNotFoundError:
            problems = rt_conf.unsupported(CONF)
        if problems:
            raise exception.InvalidConfiguration(
                'nova.conf and %s disagree: %s' % (CONF.rtrack.config_file,
                                                   '; '.join(problems)))

    def refresh(self, nodename: str) -> None:
        disk = None
        if CONF.rtrack.disk_from_driver:
            disk = rt_conf.disk_totals(self.tracker.driver_resources.get(nodename) or {})
        try:
            self.tracker.note_refresh(nodename, self.client(nodename).refresh(disk_gb=disk))
        except rt_client.NotFound:
            if not self._refresh_missing_logged:
                LOG.warning('rtrackd has no POST /v1/refresh; relying on its own audit and '
                            'report intervals')
                self._refresh_missing_logged = True
        except rt_client.RtrackError as e:
            LOG.warning('rtrackd refresh failed: %s', e)

    def stop(self) -> None:
        """The tracker is going away (service stop); nothing to do in production."""
