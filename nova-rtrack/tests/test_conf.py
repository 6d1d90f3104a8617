"""nova.conf -> rtrack.toml: the mapping, the TOML written, and the start-up mismatch check."""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
import unittest

import nova.conf
from nova.conf import devices as devices_conf

from nova_rtrack import conf as rt_conf

CONF = nova.conf.CONF


class ConfTest(unittest.TestCase):
    def setUp(self) -> None:
        CONF([], project='nova', default_config_files=[])
        rt_conf.register_opts(CONF)
        self.addCleanup(CONF.reset)
        self.addCleanup(CONF.clear_override_all_for_test
                        if hasattr(CONF, 'clear_override_all_for_test') else lambda: None)

    def flags(self, group: str | None = None, **kw: object) -> None:
        for k, v in kw.items():
            CONF.set_override(k, v, group=group)
            self.addCleanup(CONF.clear_override, k, group=group)

    def test_resources(self) -> None:
        self.flags(reserved_host_memory_mb=1024, reserved_host_cpus=2,
                   reserved_host_disk_mb=1500, cpu_allocation_ratio=8.0,
                   ram_allocation_ratio=0.0,
                   reserved_huge_pages=[{'node': '0', 'size': '2048', 'count': '64'},
                                        {'node': '1', 'size': '1GB', 'count': '1'}])
        self.flags(group='compute', cpu_dedicated_set='4-15', cpu_shared_set='0-3,^2',
                   packing_host_numa_cells_allocation_strategy=True)
        d = rt_conf.derive(CONF, host='cmp-1', hypervisor_hostname='cmp-1.example',
                           compute_node_uuid='9d3a1b2c-0000-4000-8000-000000000001',
                           include_placement=False)
        r = d['resources']
        self.assertEqual(1024, r['reserved_host_memory_mb'])
        self.assertEqual(2, r['reserved_host_cpus'])
        self.assertEqual(1500, r['reserved_host_disk_mb'])
        self.assertEqual(8.0, r['cpu_allocation_ratio'])
        self.assertNotIn('ram_allocation_ratio', r)        # Nova's 0.0 means unset
        self.assertEqual(4.0, r['initial_cpu_allocation_ratio'])
        self.assertEqual('4-15', r['cpu_dedicated_set'])
        self.assertEqual('0-3,^2', r['cpu_shared_set'])
        self.assertTrue(r['packing_host_numa_cells_allocation_strategy'])
        self.assertEqual(['node:0,size:2048,count:64', 'node:1,size:1GB,count:1'],
                         r['reserved_huge_pages'])
        self.assertEqual('cmp-1', d['host']['host'])
        self.assertEqual('cmp-1.example', d['host']['hypervisor_hostname'])
        self.assertNotIn('placement', d)

    def test_pci_and_mdev(self) -> None:
        self.flags(group='pci', device_spec=[
            json.dumps({'vendor_id': '8086', 'product_id': '1528',
                        'physical_network': 'physnet1', 'trusted': 'true'}),
            json.dumps([{'address': {'domain': '0000', 'bus': '81', 'slot': '00',
                                     'function': '[1-7]'}}, {'devname': 'eth1'}])],
            alias=[json.dumps({'name': 'vf', 'vendor_id': '8086', 'product_id': '1515',
                               'device_type': 'type-VF', 'numa_policy': 'preferred'})],
            report_in_placement=True)
        self.flags(group='devices', enabled_mdev_types=['nvidia-11', 'nvidia-12'])
        devices_conf.register_dynamic_opts(CONF)
        self.flags(group='mdev_nvidia-11', device_addresses=['0000:81:00.0'])
        self.flags(group='mdev_nvidia-12', max_instances=4, mdev_class='CUSTOM_NOTVGPU')
        d = rt_conf.derive(CONF, include_placement=False)
        self.assertEqual(3, len(d['pci']['device_spec']))
        self.assertEqual('physnet1', d['pci']['device_spec'][0]['physical_network'])
        self.assertEqual('[1-7]', d['pci']['device_spec'][1]['address']['function'])
        self.assertEqual('vf', d['pci']['alias'][0]['name'])
        self.assertTrue(d['pci']['report_in_placement'])
        self.assertEqual(['nvidia-11', 'nvidia-12'], d['devices']['enabled_mdev_types'])
        self.assertEqual({'device_addresses': ['0000:81:00.0']}, d['mdev']['nvidia-11'])
        self.assertEqual({'mdev_class': 'CUSTOM_NOTVGPU', 'max_instances': 4},
                         d['mdev']['nvidia-12'])
        # and it is valid TOML that reads back the same
        back = tomllib.loads(rt_conf.dumps_toml(d))
        self.assertEqual(d, back)

    def test_placement_keystone(self) -> None:
        # A private ConfigOpts: keystoneauth registers its plugin's options at load time.
        from oslo_config import cfg
        conf = cfg.ConfigOpts()
        conf.register_opts([cfg.StrOpt(n) for n in (
            'auth_type', 'auth_url', 'username', 'password', 'project_name',
            'endpoint_override')] + [cfg.ListOpt('valid_interfaces',
                                                 default=['internal', 'public'])],
            group='placement')
        conf([], default_config_files=[])
        for k, v in dict(auth_type='password', auth_url='http://keystone:5000/v3',
                         username='nova', password='secret', project_name='service',
                         endpoint_override='http://placement:8778').items():
            conf.set_override(k, v, group='placement')
        d = rt_conf.derive(conf)
        self.assertEqual('password', d['placement']['auth'])
        self.assertEqual('http://placement:8778', d['placement']['endpoint'])
        self.assertEqual('nova', d['placement']['username'])
        self.assertEqual('internal,public', d['placement']['interface'])
        self.assertNotIn('resources', d)

    def test_switch_over_config_passes_the_start_up_check(self) -> None:
        from nova_rtrack import cmd
        self.flags(reserved_host_memory_mb=2048)
        self.flags(group='compute', cpu_dedicated_set='4-15', cpu_shared_set='0-3')
        with tempfile.TemporaryDirectory() as d:
            cid = os.path.join(d, 'compute_id')
            with open(cid, 'w') as f:
                f.write('9d3a1b2c-0000-4000-8000-000000000001\n')
            out = os.path.join(d, 'rtrack.toml')
            cmd.write_private(out, rt_conf.dumps_toml(cmd.switch_over_config(CONF, cid)))
            self.assertEqual(0o640, os.stat(out).st_mode & 0o777)
            self.assertEqual([], rt_conf.check_file(CONF, out))
            with open(out, 'rb') as f:
                data = tomllib.load(f)
        self.assertEqual('9d3a1b2c-0000-4000-8000-000000000001',
                         data['host']['compute_node_uuid'])
        self.assertEqual('nova-compute', data['placement']['hypervisor_traits'])
        self.assertFalse(data['placement']['report_allocations'])
        self.assertEqual([], rt_conf.required_under_nova_compute(data))

    def test_config_command_needs_an_output_file(self) -> None:
        from nova_rtrack import cmd
        self.assertEqual(2, cmd.config_main([]))

    def test_toml_writer(self) -> None:
        data = {'host': {'root': '/x "y"', 'n': 3, 'f': 1.0, 'b': False},
                'pci': {'report_in_placement': True,
                        'alias': [{'name': 'a', 'vendor_id': '8086'}]},
                'mdev': {'nvidia-11': {'device_addresses': ['0000:81:00.0']},
                         'odd name': {'max_instances': 2}}}
        self.assertEqual(data, tomllib.loads(rt_conf.dumps_toml(data)))

    def test_mismatch_names_the_option(self) -> None:
        self.flags(reserved_host_memory_mb=2048, instances_path='/var/lib/nova/instances')
        self.flags(group='compute', cpu_dedicated_set='2-7')
        with tempfile.NamedTemporaryFile('w', suffix='.toml', delete=False) as f:
            f.write('[resources]\nreserved_host_memory_mb = 1024\n'
                    'cpu_dedicated_set = "2-7"\n')
        self.addCleanup(os.unlink, f.name)
        problems = rt_conf.check_file(CONF, f.name)
        self.assertEqual(1, len(problems), problems)
        self.assertIn('[DEFAULT] reserved_host_memory_mb = 2048 in nova.conf', problems[0])
        self.assertIn('resources.reserved_host_memory_mb = 1024', problems[0])

    def test_defaults_match_an_empty_file(self) -> None:
        self.flags(instances_path='/var/lib/nova/instances')
        with tempfile.NamedTemporaryFile('w', suffix='.toml', delete=False) as f:
            f.write('')
        self.addCleanup(os.unlink, f.name)
        # provider_config_location: Nova's default has a trailing slash, rtrack's not: equal.
        self.assertEqual([], rt_conf.check_file(CONF, f.name))

    def test_disk_reserved_rounds_like_nova(self) -> None:
        self.flags(reserved_host_disk_mb=1500)
        self.assertEqual([], rt_conf.mismatches(
            {'resources': {'reserved_host_disk_mb': 1500}},
            {'resources': {'reserved_host_disk_mb': 2048}}))

    def test_numa_aware_vswitches(self) -> None:
        from nova.conf import neutron as neutron_conf
        self.flags(group='neutron', physnets=['foo', 'bar'])
        neutron_conf.register_dynamic_opts(CONF)
        self.flags(group='neutron_physnet_foo', numa_nodes=[1])
        self.flags(group='neutron_physnet_bar', numa_nodes=[0, 1])
        self.flags(group='neutron_tunnel', numa_nodes=[0])
        d = rt_conf.derive(CONF, include_placement=False)
        self.assertEqual({'physnets': ['foo', 'bar']}, d['neutron'])
        self.assertEqual({'foo': {'numa_nodes': [1]}, 'bar': {'numa_nodes': [0, 1]}},
                         d['neutron_physnet'])
        self.assertEqual({'numa_nodes': [0]}, d['neutron_tunnel'])
        back = tomllib.loads(rt_conf.dumps_toml(d))
        self.assertEqual(d, back)
        # a different node for one physnet in rtrack.toml is named
        other = tomllib.loads(rt_conf.dumps_toml(d))
        other['neutron_physnet']['foo']['numa_nodes'] = [0]
        problems = rt_conf.mismatches(d, other)
        self.assertEqual(1, len(problems), problems)
        self.assertIn('[neutron_physnet_foo] numa_nodes = [1] in nova.conf', problems[0])

    def test_no_physnets_no_sections(self) -> None:
        d = rt_conf.derive(CONF, include_placement=False)
        self.assertNotIn('neutron', d)
        self.assertNotIn('neutron_physnet', d)
        self.assertNotIn('neutron_tunnel', d)

    def test_libvirt_options_rtrack_shares(self) -> None:
        self.flags(group='libvirt', cpu_power_management=True,
                   cpu_power_management_strategy='governor', cpu_mode='host-passthrough',
                   num_intel_tdx_guests=7, pmem_namespaces=['4GB:ns_0', 'SMALL:ns_1|ns_2'])
        d = rt_conf.derive(CONF, include_placement=False)
        self.assertTrue(d['resources']['cpu_power_management'])
        self.assertEqual('governor', d['resources']['cpu_power_management_strategy'])
        self.assertEqual('powersave', d['resources']['cpu_power_governor_low'])
        self.assertEqual('host-passthrough', d['devices']['cpu_mode'])
        self.assertEqual(7, d['devices']['num_intel_tdx_guests'])
        self.assertEqual(['4GB:ns_0', 'SMALL:ns_1|ns_2'], d['devices']['pmem_namespaces'])
        # one entry holding Nova's whole comma-separated string is the same configuration
        actual = tomllib.loads(rt_conf.dumps_toml(d))
        actual['devices']['pmem_namespaces'] = ['4GB:ns_0,SMALL:ns_1|ns_2']
        self.assertEqual([], rt_conf.mismatches(d, actual))
        actual['devices']['num_intel_tdx_guests'] = 8
        problems = rt_conf.mismatches(d, actual)
        self.assertEqual(1, len(problems))
        self.assertIn('[libvirt] num_intel_tdx_guests = 7 in nova.conf', problems[0])

    def test_power_management_off_is_not_written(self) -> None:
        d = rt_conf.derive(CONF, include_placement=False)
        self.assertNotIn('cpu_power_management', d['resources'])
        self.assertNotIn('cpu_power_management_strategy', d['resources'])

    def test_placement_must_leave_novas_traits_and_allocations_alone(self) -> None:
        self.flags(instances_path='/var/lib/nova/instances')
        with tempfile.NamedTemporaryFile('w', suffix='.toml', delete=False) as f:
            f.write('[placement]\nendpoint = "http://placement:8778"\n'
                    'report_allocations = true\n')
        self.addCleanup(os.unlink, f.name)
        problems = rt_conf.check_file(CONF, f.name)
        self.assertEqual(2, len(problems), problems)
        self.assertIn('placement.hypervisor_traits', problems[0])
        self.assertIn('report_allocations = true', problems[1])
        with open(f.name, 'w') as g:
            g.write('[placement]\nendpoint = "http://placement:8778"\n'
                    'hypervisor_traits = "nova-compute"\n')
        self.assertEqual([], rt_conf.check_file(CONF, f.name))

    def test_disk_totals_from_the_drivers_resources(self) -> None:
        self.assertEqual({'total': 128, 'used': 44, 'free': 84}, rt_conf.disk_totals(
            {'local_gb': 128, 'local_gb_used': 44, 'disk_available_least': 84}))
        # Overcommitted disks: Nova's disk_available_least goes negative.
        self.assertEqual({'total': 10, 'used': 10, 'free': 0}, rt_conf.disk_totals(
            {'local_gb': 10, 'local_gb_used': 12, 'disk_available_least': -5}))
        self.assertEqual({'total': 10, 'used': 4, 'free': 6},
                         rt_conf.disk_totals({'local_gb': 10, 'local_gb_used': 4}))
        self.assertIsNone(rt_conf.disk_totals({}))

    def test_vcpu_pin_set_is_passed_on_with_its_legacy_meaning(self) -> None:
        self.flags(vcpu_pin_set='0-3')
        self.assertEqual([], rt_conf.unsupported(CONF))
        self.assertEqual('0-3', rt_conf.derive(CONF)['resources']['vcpu_pin_set'])


if __name__ == '__main__':
    unittest.main()
