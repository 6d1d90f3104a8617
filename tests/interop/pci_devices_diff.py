#!/usr/bin/env python3
"""What real Nova 34's libvirt driver reports for a host's PCI functions, for the differential
test of rtrack's PCI probe (tests/it/vdpa_diff.rs): each function's dev_type and parent_addr, vDPA
devices included.

Run: target/nova-functional-venv/bin/python tests/interop/pci_devices_diff.py HOSTS.json

Input: {"hosts": [{"id": "...",
                   "pfs": [{"bus", "slot", "function", "vendor_id", "product_id",
                            "vf_product_id", "numa_node",
                            "vfs": [{"bus", "slot", "function"}, ...]}],
                   "vdpa": [{"name", "idx", "parent": "0000:06:00.2"}]}]}
A vDPA device's parent is the PCI function its sysfs path sits below; libvirt names that
function's node device its parent (`pci_0000_06_00_2`).

What Nova does: the fake libvirt connection of Nova's own functional tests
(nova/tests/fixtures/libvirt.py: HostPCIDevicesInfo with the PFs and VFs, HostVDPADevicesInfo
with the vDPA devices, as VDPAServersTest.start_vdpa_compute builds them; a vDPA device on a PF
is written the same way, which that fixture's helper refuses) answers
LibvirtDriver._get_pci_passthrough_devices, which lists the node devices and calls
Host._get_pcidev_info on each.

Output: one line per host: {"id", "devices": [{"address", "dev_type", "parent_addr"}]} or
{"id", "crash": "..."}.
"""

import importlib
import json
import sys
import types
import warnings


def load():
    warnings.simplefilter('ignore')
    from nova import objects
    objects.register_all()
    import nova.tests
    # The fake libvirt module alone: the fixtures package's __init__ needs test-only packages.
    pkg = types.ModuleType('nova.tests.fixtures')
    pkg.__path__ = [nova.tests.__path__[0] + '/fixtures']
    sys.modules['nova.tests.fixtures'] = pkg
    fakelibvirt = importlib.import_module('nova.tests.fixtures.libvirt')
    from nova.virt.libvirt import driver as libvirt_driver
    from nova.virt.libvirt import host as libvirt_host
    import logging
    logging.disable(logging.CRITICAL)
    # What LibvirtFixture does: the driver and the host use the fake module.
    libvirt_driver.libvirt = fakelibvirt
    libvirt_host.libvirt = fakelibvirt
    return fakelibvirt, libvirt_driver, libvirt_host


def vdpa_device(fl, name, idx, parent_addr):
    """A vDPA node device whose parent is the node device of `parent_addr`."""
    dev = object.__new__(fl.FakeVDPADevice)
    dev.name = name
    dev.idx = idx
    dev.parent = None
    bus, slot, function = parent_addr[5:7], parent_addr[8:10], parent_addr[11:]
    parent = f'pci_0000_{bus}_{slot}_{int(function)}'
    dev.xml = fl.FakeVDPADevice.template % {
        'name': name, 'idx': idx, 'parent': parent,
        'path': f'/sys/devices/pci0000:00/{parent_addr}/vdpa{idx}'}
    return dev


def run_host(mods, h):
    fl, libvirt_driver, libvirt_host = mods
    pci = fl.HostPCIDevicesInfo(num_pci=0, num_pfs=0, num_vfs=0)
    for pf in h['pfs']:
        nvfs = len(pf['vfs'])
        pci.add_device(
            dev_type='PF', bus=pf['bus'], slot=pf['slot'], function=pf['function'],
            iommu_group=pf['bus'], numa_node=pf['numa_node'], vf_ratio=max(nvfs, 1),
            vend_id=pf['vendor_id'], vend_name='vendor', prod_id=pf['product_id'],
            prod_name='PF', driver_name='mlx5_core')
        for i, vf in enumerate(pf['vfs']):
            pci.add_device(
                dev_type='VF', bus=vf['bus'], slot=vf['slot'], function=vf['function'],
                iommu_group=100 + i, numa_node=pf['numa_node'], vf_ratio=max(nvfs, 1),
                parent=(pf['bus'], pf['slot'], pf['function']),
                vend_id=pf['vendor_id'], vend_name='vendor',
                prod_id=pf['vf_product_id'], prod_name='VF', driver_name='mlx5_core')
    vdpa = fl.HostVDPADevicesInfo()
    for d in h['vdpa']:
        vdpa.devices[d['name']] = vdpa_device(fl, d['name'], d['idx'], d['parent'])
    conn = fl.Connection('qemu:///system', pci_info=pci, vdpa_info=vdpa)
    host = libvirt_host.Host('qemu:///system')
    host.get_connection = lambda: conn
    drv = object.__new__(libvirt_driver.LibvirtDriver)
    drv._host = host
    devs = json.loads(drv._get_pci_passthrough_devices())
    return [{'address': d['address'], 'dev_type': d['dev_type'],
             'parent_addr': d.get('parent_addr')} for d in devs]


def main():
    if len(sys.argv) != 2:
        print('usage: pci_devices_diff.py HOSTS.json', file=sys.stderr)
        return 2
    mods = load()
    with open(sys.argv[1]) as f:
        hosts = json.load(f)['hosts']
    for h in hosts:
        try:
            out = {'id': h['id'], 'devices': run_host(mods, h)}
        except Exception as e:  # reported per host
            out = {'id': h.get('id'), 'crash': '%s: %s' % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
