"""What is left to nova-compute of Nova's PCI-in-Placement logic when rtrackd reports the PCI
providers: the start-up refusals of a ``[pci] device_spec`` Placement cannot model, and the
healing of instance allocations that lack their PCI devices (Nova's scheduler allocates PCI
providers only with ``[filter_scheduler] pci_in_placement``; until then, and for instances
booted before ``[pci] report_in_placement`` was turned on, Nova's resource tracker adds them).

Nova's rules (``nova/compute/pci_placement_translator.py``): a provider per PF or type-PCI
device, named ``<nodename>_<ADDRESS>``, VFs counted on their PF's; devices with a
``physical_network`` tag are left to Neutron; a PF and one of its VFs both in the spec is
refused; a ``devname`` spec is refused. The healing sets, for each consumer that has an
allocation in this compute's tree, the amount of each PCI provider's class to the number of
devices it holds there; a consumer with no allocation in the tree (its allocation is held by
a migration) and an instance under a same-host resize are left alone.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Optional

from nova import exception

PARENT_TYPES = ('type-PCI', 'type-PF')
CHILD_TYPES = ('type-VF', 'vdpa')


def devname_refusal(specs: Iterable[dict[str, Any]]) -> Optional[exception.PlacementPciException]:
    for spec in specs:
        if spec.get('devname'):
            return exception.PlacementPciException(
                error="Invalid [pci]device_spec configuration. PCI Placement reporting does "
                      "not support 'devname' based device specification but we got %s. "
                      "Please use PCI address in the configuration instead." % (spec,))
    return None


def rp_name(nodename: str, dev: dict[str, Any]) -> Optional[str]:
    """The Placement provider a device counts on, or None (not a type Placement tracks)."""
    if dev.get('dev_type') in PARENT_TYPES:
        return '%s_%s' % (nodename, dev['address'].upper())
    if dev.get('dev_type') in CHILD_TYPES and dev.get('parent_addr'):
        return '%s_%s' % (nodename, dev['parent_addr'].upper())
    return None


def _rc(dev: dict[str, Any], tags: dict[str, Any]) -> str:
    from nova.compute import pci_placement_translator as ppt
    return ppt.get_resource_class(tags.get('resource_class'), dev.get('vendor_id'),
                                  dev.get('product_id'))


def _traits(tags: dict[str, Any]) -> set[str]:
    import os_traits
    from nova.compute import pci_placement_translator as ppt
    from oslo_utils import strutils
    traits = ppt.get_traits(tags.get('traits', '')) | {os_traits.COMPUTE_MANAGED_PCI_DEVICE}
    if strutils.bool_from_string(tags.get('live_migratable', 'false')):
        traits.add(os_traits.HW_PCI_LIVE_MIGRATABLE)
    return traits


def view_refusal(nodename: str, selected: Iterable[tuple[dict[str, Any], dict[str, Any]]]
                 ) -> Optional[exception.PlacementPciException]:
    """What Nova refuses when it builds its Placement view of the devices the spec selects
    (``selected``: (device, spec tags), in the hypervisor's order; devices with a
    ``physical_network`` are Neutron's and left out): a PF together with one of its VFs, VFs
    of one PF with different resource classes or traits. Nova's exceptions and words."""
    parents: set[str] = set()
    members: dict[str, list[str]] = collections.defaultdict(list)
    rcs: dict[str, str] = {}
    traits: dict[str, set[str]] = {}
    for dev, tags in selected:
        if tags.get('physical_network'):
            continue
        name = rp_name(nodename, dev)
        if name is None:
            continue
        is_parent = dev.get('dev_type') in PARENT_TYPES
        if name in parents or (is_parent and members[name]):
            return exception.PlacementPciDependentDeviceException(
                parent_dev=dev['address'], children_devs=','.join(members[name]))
        if is_parent:
            parents.add(name)
            members[name].append(dev['address'])
            continue
        rc, tr = _rc(dev, tags), _traits(tags)
        if name in rcs and rcs[name] != rc:
            return exception.PlacementPciMixedResourceClassException(
                new_rc=rc, new_dev=dev['address'], current_rc=rcs[name],
                current_devs=','.join(members[name]))
        if name in traits and traits[name] != tr:
            return exception.PlacementPciMixedTraitsException(
                new_traits=','.join(sorted(tr)), new_dev=dev['address'],
                current_traits=','.join(sorted(traits[name])),
                current_devs=','.join(members[name]))
        rcs[name], traits[name] = rc, tr
        members[name].append(dev['address'])
    return None


def heal(nodename: str, held: dict[str, collections.Counter],
         providers: dict[str, tuple[str, Optional[str]]], tree: set[str],
         allocations: dict[str, dict[str, Any]], skip: set[str]) -> dict[str, dict[str, Any]]:
    """The consumers whose allocations need their PCI devices added or corrected.

    ``held``: consumer -> Counter of provider names; ``providers``: name -> (uuid, resource
    class); ``tree``: the uuids of this compute's providers; ``allocations``: consumer -> its
    ``GET /allocations/{consumer}`` answer; ``skip``: instances under a same-host resize.
    Returns consumer -> the answer with the allocations changed (same shape)."""
    out: dict[str, dict[str, Any]] = {}
    for consumer, counts in held.items():
        if consumer in skip:
            continue
        current = allocations.get(consumer) or {}
        allocs = current.get('allocations') or {}
        if not any(rp in tree for rp in allocs):
            continue
        changed = False
        for name, amount in counts.items():
            uuid, rc = providers.get(name, (None, None))
            if uuid is None or rc is None:
                continue
            rp_allocs = allocs.setdefault(uuid, {'resources': {}})
            resources = rp_allocs.setdefault('resources', {})
            if resources.get(rc, 0) != amount:
                resources[rc] = amount
                changed = True
        if changed:
            out[consumer] = current
    return out
