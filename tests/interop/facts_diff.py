#!/usr/bin/env python3
"""Real Nova 34's answers for Intel TDX, vPMEM and the memory encryption and vPMEM requests of
flavors and images, for the differential test tests/it/facts_diff.rs.

Run: target/nova-functional-venv/bin/python tests/interop/facts_diff.py CASES.json

Input: {"tdx": [case], "vpmem": [case], "requests": [case]}.
  tdx:      {"id", "node", "arch", "domcap_tdx": bool, "cpu_mode": str|null,
             "num_intel_tdx_guests": int|null, "misc_capacity_file": path}
            Nova's libvirt Host with those capabilities (host CPU arch; an x86_64 machine type
            whose domain capabilities have <tdx supported=yes|no/>), no AMD SEV, and
            MISC_CONTROL_GROUP_CAPACITY_FILE pointed at the fixture's file; then
            LibvirtDriver._get_memory_encryption_inventories and
            _ensure_memory_encryption_providers on a ProviderTree rooted at `node`.
  vpmem:    {"id", "node", "conf": [str], "ndctl": [namespace]}
            LibvirtDriver._discover_vpmems(conf) with nova.privsep.libvirt.get_pmem_namespaces
            answering json.dumps(ndctl) (what `ndctl list -X` prints), then
            _update_provider_tree_for_vpmems on a ProviderTree rooted at `node`.
  requests: {"id", "extra_specs": {...}, "image": {"id", "name", "properties": {...}}}
            hardware.get_mem_encryption_constraint, ResourceRequest.from_request_spec (the
            unsuffixed group's resources and required traits) and hardware.numa_get_constraints
            on a Flavor (name "f1", 2 vCPUs, 1024 MB) and the ImageMeta.

Output (stdout, one JSON document): {"tdx": [{"id", "inventory", "children"}], "vpmem": [{"id",
"error", "by_name", "inventory"}], "requests": [{"id", "error", "model", "resources", "traits",
"numa_cells"}]}; "error" is "ExceptionClass: message" or null.
"""

import collections
import copy
import json
import sys
import uuid
import warnings
from unittest import mock


def load():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        from nova import objects
        objects.register_all()
        import nova.conf
        from nova.compute import provider_tree
        from nova.scheduler import utils as sched_utils
        from nova.virt import hardware
        from nova.virt.libvirt import config as vconfig
        from nova.virt.libvirt import driver as lvdriver
        from nova.virt.libvirt import host as lvhost
    import logging
    logging.disable(logging.CRITICAL)
    nova.conf.CONF([], project='nova')
    return {'objects': objects, 'CONF': nova.conf.CONF, 'tree': provider_tree,
            'sched': sched_utils, 'hardware': hardware, 'vconfig': vconfig,
            'driver': lvdriver, 'host': lvhost}


N = None


def error(e):
    return '%s: %s' % (type(e).__name__, e)


def tree_children(pt, node):
    """The providers below `node`: name -> {inventory, traits}."""
    out = {}
    for u in pt.get_provider_uuids():
        data = pt.data(u)
        if data.name == node:
            continue
        out[data.name] = {'parent': pt.data(data.parent_uuid).name,
                          'inventory': data.inventory,
                          'traits': sorted(data.traits)}
    return out


def fake_host(case):
    vc = N['vconfig']
    h = N['host'].Host.__new__(N['host'].Host)
    h._supports_amd_sev = False
    h._supports_amd_sev_es = False
    h._supports_amd_sev_snp = False
    h._max_sev_guests = 0
    h._max_sev_es_guests = 0
    h._supports_intel_tdx = None
    h._max_intel_tdx_guests = None
    caps = vc.LibvirtConfigCaps()
    caps.host = vc.LibvirtConfigCapsHost()
    caps.host.cpu = vc.LibvirtConfigCPU()
    caps.host.cpu.arch = case['arch']
    dom = vc.LibvirtConfigDomainCaps()
    feature = vc.LibvirtConfigDomainCapsFeatureTDX()
    feature.supported = case['domcap_tdx']
    dom._features = vc.LibvirtConfigDomainCapsFeatures()
    dom._features.features = [feature]
    h.get_capabilities = lambda: caps
    h.get_domain_capabilities = lambda: {'x86_64': {'q35': dom}}
    return h


def run_tdx(case):
    CONF = N['CONF']
    CONF.set_override('cpu_mode', case['cpu_mode'], group='libvirt')
    CONF.set_override('num_intel_tdx_guests', case['num_intel_tdx_guests'], group='libvirt')
    drv = N['driver'].LibvirtDriver.__new__(N['driver'].LibvirtDriver)
    drv._host = fake_host(case)
    with mock.patch.object(N['host'], 'MISC_CONTROL_GROUP_CAPACITY_FILE',
                           case['misc_capacity_file']):
        inventories = drv._get_memory_encryption_inventories()
    pt = N['tree'].ProviderTree()
    pt.new_root(case['node'], str(uuid.uuid4()))
    drv._ensure_memory_encryption_providers(copy.deepcopy(inventories), pt, case['node'])
    return {'id': case['id'], 'inventory': inventories.get('intel_tdx'),
            'children': tree_children(pt, case['node'])}


def run_vpmem(case):
    out = {'id': case['id'], 'error': None, 'by_name': {}, 'inventory': {}}
    drv = N['driver'].LibvirtDriver.__new__(N['driver'].LibvirtDriver)
    try:
        with mock.patch('nova.privsep.libvirt.get_pmem_namespaces',
                        return_value=json.dumps(case['ndctl'])):
            by_name, by_rc = drv._discover_vpmems(case['conf'])
    except Exception as e:  # Nova's own refusal (or its crash) is the answer
        out['error'] = error(e)
        return out
    out['by_name'] = {n: {'label': d.label, 'devpath': d.devpath, 'size': d.size,
                          'align': d.align} for n, d in by_name.items()}
    drv._vpmems_by_rc = by_rc
    pt = N['tree'].ProviderTree()
    pt.new_root(case['node'], str(uuid.uuid4()))
    inventory = {}
    drv._update_provider_tree_for_vpmems(pt, case['node'], inventory,
                                         collections.defaultdict(set))
    out['inventory'] = inventory
    return out


def run_request(case):
    objects = N['objects']
    out = {'id': case['id'], 'error': None, 'model': None, 'resources': {}, 'traits': [],
           'numa_cells': None}
    flavor = objects.Flavor(id=1, flavorid='f', name='f1', vcpus=2, memory_mb=1024,
                            root_gb=1, ephemeral_gb=0, swap=0,
                            extra_specs=case['extra_specs'])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        image = objects.ImageMeta.from_dict(case['image'])
    try:
        cfg = N['hardware'].get_mem_encryption_constraint(flavor, image)
        out['model'] = cfg.model if cfg else None
        spec = objects.RequestSpec(flavor=flavor, image=image, is_bfv=False)
        rr = N['sched'].ResourceRequest.from_request_spec(spec)
        group = rr.get_request_group(None)
        out['resources'] = {k: v for k, v in group.resources.items()
                            if k == 'MEM_ENCRYPTION_CONTEXT' or k.startswith('CUSTOM_')}
        out['traits'] = sorted(group.required_traits)
        topo = N['hardware'].numa_get_constraints(flavor, image)
        out['numa_cells'] = len(topo.cells) if topo else None
    except Exception as e:
        out['error'] = error(e)
    return out


def main():
    global N
    N = load()
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    json.dump({'tdx': [run_tdx(c) for c in cases.get('tdx', [])],
               'vpmem': [run_vpmem(c) for c in cases.get('vpmem', [])],
               'requests': [run_request(c) for c in cases.get('requests', [])]},
              sys.stdout, sort_keys=True)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main()
