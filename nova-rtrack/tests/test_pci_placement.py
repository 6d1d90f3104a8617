"""Nova's PCI-in-Placement duties left to nova-compute (nova_rtrack.pci_placement)."""

from __future__ import annotations

import collections

from nova import exception
from nova import test

from nova_rtrack import pci_placement

PF = {'address': '0000:81:00.0', 'dev_type': 'type-PF'}
VF = {'address': '0000:81:00.1', 'dev_type': 'type-VF', 'parent_addr': '0000:81:00.0'}


class RefusalTest(test.NoDBTestCase):
    def test_devname(self) -> None:
        err = pci_placement.devname_refusal([{'address': '0000:81:00.0'},
                                             {'devname': 'eth0'}])
        self.assertIsInstance(err, exception.PlacementPciException)
        self.assertIn("does not support 'devname' based device specification but we got "
                      "{'devname': 'eth0'}. Please use PCI address", str(err))
        self.assertIsNone(pci_placement.devname_refusal([{'address': '0000:81:00.0'}]))

    def test_pf_and_its_vf(self) -> None:
        err = pci_placement.view_refusal('c1', [(PF, {}), (VF, {})])
        self.assertIsInstance(err, exception.PlacementPciDependentDeviceException)
        self.assertIn('Configuring both 0000:81:00.1 and 0000:81:00.0 in [pci]device_spec',
                      str(err))
        self.assertIsNone(pci_placement.view_refusal('c1', [(VF, {})]))
        self.assertIsNone(pci_placement.view_refusal('c1', [(PF, {})]))
        # a PF for Neutron (physical_network) is not in Placement's view
        self.assertIsNone(pci_placement.view_refusal(
            'c1', [(PF, {'physical_network': 'net1'}), (VF, {})]))

    def test_sibling_vfs_must_agree(self) -> None:
        vf2 = dict(VF, address='0000:81:00.2')
        err = pci_placement.view_refusal(
            'c1', [(VF, {'resource_class': 'foo'}), (vf2, {'resource_class': 'bar'})])
        self.assertIsInstance(err, exception.PlacementPciMixedResourceClassException)
        self.assertIn('We got CUSTOM_BAR for 0000:81:00.2 and CUSTOM_FOO for 0000:81:00.1',
                      str(err))
        err = pci_placement.view_refusal(
            'c1', [(VF, {'traits': 'foo'}), (vf2, {'traits': 'bar'})])
        self.assertIsInstance(err, exception.PlacementPciMixedTraitsException)
        self.assertIsNone(pci_placement.view_refusal(
            'c1', [(VF, {'traits': 'foo'}), (vf2, {'traits': 'foo'})]))

    def test_provider_names(self) -> None:
        self.assertEqual('c1_0000:81:00.0', pci_placement.rp_name('c1', VF))
        self.assertEqual('c1_0000:81:00.0', pci_placement.rp_name('c1', PF))
        self.assertIsNone(pci_placement.rp_name('c1', {'address': 'x', 'dev_type': 'other'}))


class HealTest(test.NoDBTestCase):
    def test_missing_and_wrong_amounts_are_set(self) -> None:
        held = {'i1': collections.Counter({'c1_0000:81:00.0': 2}),
                'i2': collections.Counter({'c1_0000:81:00.0': 1}),
                'gone': collections.Counter({'c1_0000:81:00.0': 1}),
                'resizing': collections.Counter({'c1_0000:81:00.0': 1})}
        providers = {'c1_0000:81:00.0': ('rp-pf', 'CUSTOM_PCI_8086_1515')}
        root = {'root': {'resources': {'VCPU': 1}}}
        allocations = {
            'i1': {'allocations': dict(root), 'consumer_generation': 1},
            'i2': {'allocations': {'root': {'resources': {'VCPU': 1}},
                                   'rp-pf': {'resources': {'CUSTOM_PCI_8086_1515': 1}}}},
            'gone': {'allocations': {}},
            'resizing': {'allocations': dict(root)},
        }
        out = pci_placement.heal('c1', held, providers, {'root', 'rp-pf'}, allocations,
                                 skip={'resizing'})
        self.assertEqual(['i1'], sorted(out))
        self.assertEqual({'CUSTOM_PCI_8086_1515': 2},
                         out['i1']['allocations']['rp-pf']['resources'])
        self.assertEqual(1, out['i1']['consumer_generation'])
