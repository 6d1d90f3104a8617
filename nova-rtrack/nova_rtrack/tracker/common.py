"""What the tracker's modules share: nova.conf, the logger, the lock's name, the refusal
sentences and Nova's small rules.

One place so that every part of ``RtrackResourceTracker`` logs to the logger the single module
had (``nova_rtrack.tracker``, which operators' log filters name) and raises Nova's sentences.
"""

from __future__ import annotations

from typing import Any, Optional

from oslo_log import log as logging

from nova.compute import task_states
from nova.compute import vm_states
import nova.conf
from nova import exception

from nova_rtrack import client as rt_client
from nova_rtrack import conf as rt_conf

CONF = nova.conf.CONF
# The Nova components whose warnings the drop-in gives in their place (see
# _warn_held_unselected).
PCI_MANAGER_LOG = logging.getLogger('nova.pci.manager')
PCI_PLACEMENT_LOG = logging.getLogger('nova.compute.pci_placement_translator')
rt_conf.register_opts(CONF)
# The tracker's logger, by the name it had as one module (nova_rtrack/tracker.py).
LOG = logging.getLogger('nova_rtrack.tracker')

COMPUTE_RESOURCE_SEMAPHORE = 'compute_resources'

# ComputeNode fields rtrackd decides. The rest (hypervisor facts, cpu_info, host_ip,
# disk_available_least, supported_hv_specs) comes from the virt driver, and stats from Nova's
# Stats.
RTRACK_NODE_FIELDS = (
    'vcpus', 'memory_mb', 'local_gb', 'vcpus_used', 'memory_mb_used', 'local_gb_used',
    'free_ram_mb', 'free_disk_gb', 'running_vms', 'numa_topology', 'pci_device_pools',
    'cpu_allocation_ratio', 'ram_allocation_ratio', 'disk_allocation_ratio',
)

NUMA_REFUSED = 'Requested instance NUMA topology cannot fit the given host NUMA topology'
NUMA_PCI_REFUSED = ('Requested instance NUMA topology together with requested PCI devices '
                    'cannot fit the given host NUMA topology')
PAGE_SIZE_REFUSED = 'Requested page size is different from current page size.'
PCI_REFUSED = 'Claim pci failed'

OPEN_RTRACK_MIGRATION = ('pre-migrating', 'accepted', 'migrating', 'post-migrating',
                         'finished', 'running', 'preparing', 'queued')


# -- helpers -------------------------------------------------------------------------------

def _unavailable(reason: str) -> exception.ComputeResourcesUnavailable:
    return exception.ComputeResourcesUnavailable(reason=reason)


def _refusal_reason(err: rt_client.RtrackError, has_pci: bool,
                    live_migration: bool = False) -> str:
    """Nova's sentence for a refusal (tests and operators grep for these)."""
    d = err.details or {}
    msg = err.message or ''
    if live_migration and 'page size' in msg.lower():
        return PAGE_SIZE_REFUSED
    if d.get('numa'):
        reason = str(d['numa'].get('reason') or '')
        if live_migration and 'page size' in reason.lower():
            return PAGE_SIZE_REFUSED
        return NUMA_PCI_REFUSED if has_pci else NUMA_REFUSED
    if d.get('pci'):
        return PCI_REFUSED
    return msg or 'rtrackd refused the claim'


def _in_resize_state(instance: Any) -> bool:
    """Nova's rule (resource_tracker._instance_in_resize_state)."""
    vm, task = instance.vm_state, instance.task_state
    if vm == vm_states.RESIZED:
        return True
    return vm in (vm_states.ACTIVE, vm_states.STOPPED) and task in (
        task_states.resizing_states + task_states.rebuild_states)


def _is_live_migrating(instance: Any) -> bool:
    return (instance.task_state == task_states.MIGRATING and
            instance.vm_state in (vm_states.ACTIVE, vm_states.PAUSED))


def _state(v: Optional[str]) -> str:
    return '' if v is None else v
