"""A drop-in for Nova 34's ``nova.compute.resource_tracker.ResourceTracker`` backed by rtrackd.

Every decision (does it fit, which host CPUs, which page size, which PCI devices, which vGPU)
is rtrackd's, asked over its socket with Nova's own objects as the bodies. This class only:

- builds the bodies (``RequestSpec.from_components(...)`` primitives, the instance's state,
  Placement's allocations) and applies rtrackd's answers to Nova's objects (the instance's
  ``numa_topology``, host/node, ``pci_devices``, the ``MigrationContext``);
- keeps Nova's DB records in step: the ComputeNode (loaded from rtrackd's ComputeNode primitive
  and saved through Nova's objects after every change, so the scheduler's filters read what
  rtrackd computed) and the PciDevice rows;
- keeps what is Nova's: the per-node ``Stats`` (derived counts), the driver's own traits on the
  compute node provider (rtrackd reports the inventory), Placement allocation clean-ups, the
  Migration records.

rtrackd refusing, timing out or being down makes the claim fail with
``ComputeResourcesUnavailable`` so that Nova reschedules: never a guest on an unclaimed host.

The class is assembled here from mixins, one module per part (its methods moved unchanged):

- :mod:`.common`: nova.conf, the logger, the lock's name, the refusal sentences, Nova's rules;
- :mod:`.binding`: :class:`DaemonBinding`, how the tracker reaches its rtrackd;
- :mod:`.bodies`: the request bodies built from Nova's objects;
- :mod:`.instance_claims`: ``instance_claim``, its abort, ``update_usage``, vPMEM and vGPUs;
- :mod:`.moves`: resize, migration, evacuation claims, confirm and revert;
- :mod:`.pci`: the PCI claims for ports and the PciDevice rows;
- :mod:`.audit`: ``update_available_resource`` and the ComputeNode record;
- :mod:`.placement`: the traits, PCI in Placement, allocation clean-ups.

Every name this module had when it was one file is still here (``nova_rtrack.tracker.X``).
The binding factory stays a global of this module: ``set_binding_factory`` and the tracker's
``__init__`` read and write it here.
"""

from __future__ import annotations

# The one-file tracker's imports, all kept: each is still an attribute of this module
# (the tests patch through ``nova_rtrack.tracker.compute_utils``).
import collections
import copy  # noqa: F401
from typing import Any, Callable
from typing import Optional  # noqa: F401

import os_traits  # noqa: F401
from oslo_log import log as logging  # noqa: F401
from oslo_serialization import jsonutils  # noqa: F401
from oslo_utils import excutils  # noqa: F401

from nova.compute import monitors
from nova.compute import stats as compute_stats
from nova.compute import task_states  # noqa: F401
from nova.compute import utils as compute_utils  # noqa: F401
from nova.compute import vm_states  # noqa: F401
import nova.conf  # noqa: F401
from nova import exception
from nova import objects
from nova.objects import fields  # noqa: F401
from nova.objects import migration as migration_obj  # noqa: F401
from nova.pci import request as pci_request  # noqa: F401
from nova.pci import whitelist  # noqa: F401
from nova.scheduler.client import report
from nova import utils
from nova.virt import node as virt_node  # noqa: F401

from nova_rtrack import claims as rt_claims  # noqa: F401
from nova_rtrack import client as rt_client
from nova_rtrack import conf as rt_conf  # noqa: F401
from nova_rtrack import driver_patches
from nova_rtrack import pci_placement  # noqa: F401
from nova_rtrack.tracker.audit import AuditMixin
from nova_rtrack.tracker.binding import DaemonBinding
from nova_rtrack.tracker.bodies import RequestBodiesMixin
from nova_rtrack.tracker.bodies import _placed_devices  # noqa: F401
from nova_rtrack.tracker.common import COMPUTE_RESOURCE_SEMAPHORE
from nova_rtrack.tracker.common import CONF
from nova_rtrack.tracker.common import LOG  # noqa: F401
from nova_rtrack.tracker.common import NUMA_PCI_REFUSED  # noqa: F401
from nova_rtrack.tracker.common import NUMA_REFUSED  # noqa: F401
from nova_rtrack.tracker.common import OPEN_RTRACK_MIGRATION  # noqa: F401
from nova_rtrack.tracker.common import PAGE_SIZE_REFUSED  # noqa: F401
from nova_rtrack.tracker.common import PCI_MANAGER_LOG  # noqa: F401
from nova_rtrack.tracker.common import PCI_PLACEMENT_LOG  # noqa: F401
from nova_rtrack.tracker.common import PCI_REFUSED  # noqa: F401
from nova_rtrack.tracker.common import RTRACK_NODE_FIELDS  # noqa: F401
from nova_rtrack.tracker.common import _in_resize_state  # noqa: F401
from nova_rtrack.tracker.common import _is_live_migrating  # noqa: F401
from nova_rtrack.tracker.common import _refusal_reason  # noqa: F401
from nova_rtrack.tracker.common import _state  # noqa: F401
from nova_rtrack.tracker.common import _unavailable  # noqa: F401
from nova_rtrack.tracker.instance_claims import InstanceClaimsMixin
from nova_rtrack.tracker.moves import MovesMixin
from nova_rtrack.tracker.pci import PciMixin
from nova_rtrack.tracker.placement import PlacementMixin


_binding_factory: Callable[['RtrackResourceTracker'], DaemonBinding] = DaemonBinding


def set_binding_factory(factory: Callable[['RtrackResourceTracker'], DaemonBinding]) -> None:
    global _binding_factory
    _binding_factory = factory


class RtrackResourceTracker(InstanceClaimsMixin, MovesMixin, PciMixin, AuditMixin,
                            PlacementMixin, RequestBodiesMixin):
    """Nova's ResourceTracker interface, every decision asked of rtrackd."""

    def __init__(self, host: str, driver: Any, reportclient: Any = None) -> None:
        self.service_ref = None
        self.host = host
        self.driver = driver
        self.pci_tracker = None
        self.compute_nodes: dict[str, Any] = {}
        self.stats: dict[str, compute_stats.Stats] = collections.defaultdict(
            compute_stats.Stats)
        self.tracked_instances: set[str] = set()
        self.tracked_migrations: dict[str, Any] = {}
        self.is_bfv: dict[str, bool] = {}
        monitor_handler = monitors.MonitorHandler(self)
        self.monitors = monitor_handler.monitors
        self.old_resources: dict[str, Any] = collections.defaultdict(objects.ComputeNode)
        self.reportclient = reportclient or report.report_client_singleton()
        self.ram_allocation_ratio = CONF.ram_allocation_ratio
        self.cpu_allocation_ratio = CONF.cpu_allocation_ratio
        self.disk_allocation_ratio = CONF.disk_allocation_ratio
        self.provider_tree = None
        self.assigned_resources: dict = collections.defaultdict(
            lambda: collections.defaultdict(set))
        self.absent_providers: set = set()
        self.provider_configs: dict = {}
        # Last driver resources per node (the harness and the ComputeNode sync read it).
        self.driver_resources: dict[str, dict[str, Any]] = {}
        # Per node: the PCI inventory changes Placement refused at the last refresh.
        self.pci_inventory_in_use: dict[str, list[dict[str, Any]]] = {}
        # rtrackd's vGPU choices per instance (mdevs of the last claim or move answer), for
        # the libvirt driver's _allocate_mdevs (driver_patches).
        self.claimed_mdevs: dict[str, list[dict[str, Any]]] = {}
        # instance uuid -> PCI addresses claimed but not yet allocated (see _claim_only)
        self.pci_claimed_only: dict[str, set[str]] = {}
        # Nova's PciDevTracker reads [pci] device_spec once, when the service starts.
        self.device_spec: list[str] = list(CONF.pci.device_spec or [])
        driver_patches.bind(driver, self)
        self.binding = _binding_factory(self)
        # A disagreement between nova.conf and rtrack.toml stops nova-compute here, naming
        # the option (the manager builds the tracker while the service is created).
        self.binding.startup_check()

    # -- service ----------------------------------------------------------------------------

    def set_service_ref(self, service_ref: Any) -> None:
        if self.service_ref and self.service_ref.id != service_ref.id:
            raise exception.ComputeServiceInUse(
                'Resource tracker re-initialized with a different service')
        elif service_ref.host != self.host:
            raise exception.ServiceNotUnique(
                'Resource tracker initialized with service that does '
                'not match host')
        self.service_ref = service_ref

    def disabled(self, nodename: str) -> bool:
        return (nodename not in self.compute_nodes or
                not self.driver.node_is_available(nodename))

    def _client(self, nodename: str) -> rt_client.RtrackClient:
        return self.binding.client(nodename)

    # -- bookkeeping ------------------------------------------------------------------------

    def build_failed(self, nodename: str) -> None:
        self.stats[nodename].build_failed()

    def build_succeeded(self, nodename: str) -> None:
        self.stats[nodename].build_succeeded()

    def remove_node(self, nodename: str) -> None:
        self.stats.pop(nodename, None)
        self.compute_nodes.pop(nodename, None)
        self.old_resources.pop(nodename, None)

    @utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def clean_compute_node_cache(self, compute_nodes_in_db: Any) -> None:
        names = {cn.hypervisor_hostname for cn in compute_nodes_in_db}
        for stale in set(self.compute_nodes) - names:
            self.remove_node(stale)
            self.reportclient.invalidate_resource_provider(stale)

    def get_node_by_name(self, nodename: str) -> Any:
        try:
            return self.compute_nodes[nodename]
        except KeyError:
            raise exception.ComputeHostNotFound(host=nodename)
