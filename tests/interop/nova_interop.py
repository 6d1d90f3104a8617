#!/usr/bin/env python3
"""Feeds rtrack's object primitives to real Nova (nova==34.0.0) and checks that Nova agrees.

Input: a JSON file holding a list of cases
    {"name": "...", "object": "ComputeNode", "primitive": {...},
     "newest": {...}   # optional: the same object at its newest version, for backports
    }
For every case:
  1. NovaObject.obj_from_primitive() loads it (the entry point NovaObjectSerializer uses);
  2. obj_to_primitive() gives the input back (changes lists and set-typed values compared as
     sets; any type or value change is a failure, since Nova's loader coerces silently);
  3. for a backport case, Nova's own backport of `newest` to the same version (with the version
     manifest nova-conductor would send) equals rtrack's primitive;
  4. ComputeNode only: numa_topology is the JSON of a NUMATopology that Nova loads and re-emits
     unchanged, cpu_info and metrics parse, and the scheduler's HostState.update(compute=node)
     consumes the node, seeing the same vcpus, memory, disk and PCI pools.
Exit status: 0 all passed, 1 a check failed, 2 bad input.
"""

import copy
import json
import sys
import warnings


def load_nova():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        from nova import objects
        objects.register_all()
        from nova.objects import base as nova_base
        from oslo_versionedobjects import base as ovo_base
        from nova.scheduler import host_manager
    import logging
    logging.disable(logging.CRITICAL)
    # A ComputeNode backported below 1.13 without service_id makes Nova look the Service up in
    # its database; there is none here, so answer as an empty database would ("not found"),
    # which is Nova's documented fallback (service_id = -1).
    from nova import exception

    def no_service(cls, context, host, *args, **kwargs):
        raise exception.ComputeHostNotFound(host=host)

    objects.Service.get_by_compute_host = classmethod(no_service)
    return objects, nova_base, ovo_base, host_manager


SET_KEYS = {'cpuset', 'pcpuset', 'pinned_cpus', 'physnets'}


def norm(value, key=None):
    """Normalizes what Nova emits in set order: changes lists and set-typed fields."""
    if isinstance(value, dict):
        return {k: norm(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == 'nova_object.changes' or key in SET_KEYS:
            return sorted(value, key=json.dumps)
        if key == 'siblings':
            return sorted((sorted(s) for s in value), key=json.dumps)
        return [norm(v) for v in value]
    return value


def as_json(prim):
    """What goes on the wire: Nova's jsonutils turns sets and tuples into lists."""
    from oslo_serialization import jsonutils
    return json.loads(jsonutils.dumps(prim))


def diff(a, b, path='$'):
    """First differences between two JSON values, with types (1 != 1.0 != True)."""
    out = []
    if type(a) is not type(b):
        return ['%s: rtrack %r (%s), Nova %r (%s)' % (path, a, type(a).__name__, b, type(b).__name__)]
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append('%s.%s: missing in rtrack, Nova has %r' % (path, k, b[k]))
            elif k not in b:
                out.append('%s.%s: rtrack has %r, Nova dropped it' % (path, k, a[k]))
            else:
                out.extend(diff(a[k], b[k], '%s.%s' % (path, k)))
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append('%s: rtrack has %d items, Nova %d' % (path, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(diff(x, y, '%s[%d]' % (path, i)))
    elif a != b:
        out.append('%s: rtrack %r, Nova %r' % (path, a, b))
    return out[:10]


def check_pools(case, objects):
    """Nova's own PciDeviceStats, fed the devices rtrack tracks and the same device specs, must
    build the same pools."""
    from nova.pci import stats as pci_stats
    from nova.pci import whitelist
    wl = whitelist.Whitelist([json.dumps(s) for s in case['device_spec']])
    stats = pci_stats.PciDeviceStats(None, dev_filter=wl)
    for d in case['devices']:
        extra = {'parent_ifname': d['parent_ifname']} if d.get('parent_ifname') else {}
        dev = objects.PciDevice(
            compute_node_id=1, address=d['address'], vendor_id=d['vendor_id'],
            product_id=d['product_id'], dev_type=d['dev_type'], status='available',
            numa_node=d['numa_node'], parent_addr=d.get('parent_addr'), extra_info=extra,
            instance_uuid=None, request_id=None, dev_id='pci_' + d['address'], label='label')
        stats.add_device(dev)
    novas = as_json(stats.to_device_pools_obj().obj_to_primitive())
    key = lambda p: json.dumps(p['nova_object.data'], sort_keys=True)
    ours = sorted(case['pools']['nova_object.data']['objects'], key=key)
    theirs = sorted(novas['nova_object.data']['objects'], key=key)
    problems = ['pools: ' + d for d in diff([p['nova_object.data'] for p in ours],
                                           [p['nova_object.data'] for p in theirs])]
    # Nova uses the pools in order of their number of keys; rtrack's order must agree with that.
    lens = [len(p['nova_object.data']['tags']) for p in case['pools']['nova_object.data']['objects']]
    if lens != sorted(lens):
        problems.append('pools are not ordered plainest first: %s' % lens)
    return problems


def check_case(case, nova):
    objects, nova_base, ovo_base, host_manager = nova
    if 'devices' in case:
        return check_pools(case, objects)
    problems = []
    prim = case['primitive']
    name = prim.get('nova_object.name')
    try:
        obj = nova_base.NovaObject.obj_from_primitive(copy.deepcopy(prim))
    except Exception as e:
        return ['obj_from_primitive: %s: %s' % (type(e).__name__, e)]
    again = as_json(obj.obj_to_primitive())
    problems += ['round trip: ' + d for d in diff(norm(prim), norm(again))]

    newest = case.get('newest')
    if newest is not None:
        target = prim['nova_object.version']
        full = nova_base.NovaObject.obj_from_primitive(copy.deepcopy(newest))
        manifest = ovo_base.obj_tree_get_versions(name)
        manifest[name] = target
        novas = as_json(full.obj_to_primitive(target_version=target, version_manifest=manifest))
        problems += ['backport to %s: ' % target + d for d in diff(norm(prim), norm(novas))]

    if name == 'ComputeNode':
        problems += check_compute_node(obj, prim, objects, host_manager)
    return problems


def check_compute_node(cn, prim, objects, host_manager):
    problems = []
    data = prim['nova_object.data']
    if data.get('numa_topology') is not None:
        try:
            topo = objects.NUMATopology.obj_from_db_obj(data['numa_topology'])
            problems += ['numa_topology round trip: ' + d for d in diff(
                norm(json.loads(data['numa_topology'])), norm(as_json(topo.obj_to_primitive())))]
        except Exception as e:
            problems.append('numa_topology: %s: %s' % (type(e).__name__, e))
    for field, kind in (('cpu_info', dict), ('metrics', list)):
        if data.get(field) is not None:
            try:
                if not isinstance(json.loads(data[field]), kind):
                    problems.append('%s is JSON but not a %s' % (field, kind.__name__))
            except ValueError as e:
                problems.append('%s is not JSON: %s' % (field, e))
    # The scheduler needs fields that exist only in newer versions (uuid since 1.15); older
    # primitives are for older schedulers.
    if tuple(int(x) for x in prim['nova_object.version'].split('.')) >= (1, 16):
        hs = host_manager.HostState(data.get('host') or 'host', data.get('hypervisor_hostname') or 'node', None)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                hs.update(compute=cn)
        except Exception as e:
            return problems + ['HostState.update: %s: %s' % (type(e).__name__, e)]
        expect = {
            'vcpus_total': data['vcpus'],
            'vcpus_used': data['vcpus_used'],
            'total_usable_ram_mb': data['memory_mb'],
            'free_ram_mb': data['free_ram_mb'],
        }
        for attr, want in expect.items():
            if getattr(hs, attr) != want:
                problems.append('HostState.%s is %r, expected %r' % (attr, getattr(hs, attr), want))
        problems += check_maxphysaddr(hs, data, objects)
        pools = data['pci_device_pools']['nova_object.data']['objects'] if data.get('pci_device_pools') else []
        seen = hs.pci_stats.pools if hs.pci_stats else []
        if len(seen) != len(pools):
            problems.append('HostState has %d PCI pools, the node %d' % (len(seen), len(pools)))
        else:
            want = sum(p['nova_object.data']['count'] for p in pools)
            got = sum(p['count'] for p in seen)
            if want != got:
                problems.append('HostState PCI pools hold %d devices, the node %d' % (got, want))
    return problems


def check_maxphysaddr(hs, data, objects):
    """ComputeCapabilitiesFilter with hw:maxphysaddr_bits: the node's bits pass, one more does
    not; a node without maxphysaddr passes no such flavor."""
    from nova.scheduler.filters import compute_capabilities_filter as ccf
    bits = json.loads(data.get('cpu_info') or '{}').get('maxphysaddr', {}).get('bits')
    problems = []
    for want, ok in ((bits, True), ((bits or 0) + 1, False)):
        if want is None:
            continue
        spec = objects.RequestSpec(flavor=objects.Flavor(extra_specs={'hw:maxphysaddr_bits': str(want)}))
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            passed = ccf.ComputeCapabilitiesFilter().host_passes(hs, spec)
        if passed != ok:
            problems.append('ComputeCapabilitiesFilter hw:maxphysaddr_bits=%s: %s, expected %s (node bits %s)' % (want, passed, ok, bits))
    return problems


def main():
    if len(sys.argv) != 2:
        sys.stderr.write('usage: nova_interop.py CASES.json\n')
        return 2
    try:
        with open(sys.argv[1]) as f:
            cases = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write('nova_interop: %s: %s\n' % (sys.argv[1], e))
        return 2
    nova = load_nova()
    failed = 0
    for case in cases:
        problems = check_case(case, nova)
        status = 'FAIL' if problems else 'ok'
        print('%-4s %s' % (status, case['name']))
        for p in problems:
            print('       - %s' % p)
        failed += bool(problems)
    from importlib.metadata import version
    print('%d case(s) checked against nova %s: %d failed' % (len(cases), version('nova'), failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
