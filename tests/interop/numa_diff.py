#!/usr/bin/env python3
"""Real Nova 34's answers to NUMA scenarios, for the differential test (tests/it/numa_diff.rs).

Input: a JSON file {"cases": [case, ...]}. A case:
    {"id": "...",
     "host": {"arch": "x86_64", "base_page_kb": 4, "online": [cpu, ...],
              "cells": [{"id", "cpus", "siblings": [[...]], "socket", "memory_kb",
                         "hugepages": {"2048": n, ...}}],
              "offline": [cpu, ...], "cpu_count": n},
     "config": {"cpu_dedicated_set", "cpu_shared_set", "reserved_huge_pages",
                "cpu_allocation_ratio", "ram_allocation_ratio",
                "packing_host_numa_cells_allocation_strategy", "cpu_power_management"},
     "steps": [{"op": "claim"|"check", "id", "flavor": {vcpus, memory_mb, extra_specs},
                "image_properties": {...}, "rtrack_host": "<NUMATopology JSON>"},
               {"op": "free", "id"},
               {"op": "resize", "id", "flavor", "image_properties", "rtrack_host"},
               {"op": "confirm", "id"}, {"op": "revert", "id"},
               {"op": "audit"}]}
`rtrack_host` is the ComputeNode numa_topology rtrack reported before the step: Nova's
NUMATopologyFilter is run on it.

What Nova does here, per step, as its resource tracker would:
  - the host topology: LibvirtDriver._get_host_numa_topology on capabilities built from the
    host facts (the cells as libvirt reported them at nova-compute's start, every dedicated CPU
    powered up), with the configuration set through nova.conf ([libvirt] cpu_power_management
    included); Host.get_online_cpus answers `online` less `offline` (the CPUs online now),
    Host.get_available_cpus range(cpu_count) (libvirt's CPU count), else the online ones;
  - claim/check: hardware.numa_get_constraints(flavor, image), then
    hardware.numa_fit_instance_to_host with NUMATopologyLimits from the ratios; a claim adds
    the fitted topology with hardware.numa_usage_from_instance_numa;
  - resize: fit of the new flavor on the host as it is (old kept); confirm frees the old,
    revert the new;
  - free: numa_usage_from_instance_numa(free=True); audit: usage rebuilt from the live
    instances;
  - "nocache": the same fit with every (guest cell, host cell) pair judged once, on fresh
    copies, through Nova's own _numa_fit_instance_cell, host cells in Nova's order: what
    numa_fit_instance_to_host would answer without its fit cache and without keeping the page
    size of one attempt for the next.

Output: one JSON object per case on stdout, {"id", "host": [...cells...], "steps": [...]}.
"""

import copy
import json
import sys
import warnings


def load():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        from nova import objects
        objects.register_all()
        from nova import conf, exception
        from nova.objects import fields
        from nova.virt import hardware
        from nova.virt.libvirt import config as vconfig
        from nova.virt.libvirt import driver as libvirt_driver
        from nova.scheduler.filters import numa_topology_filter
        from nova.scheduler import host_manager
        from nova.pci import stats as pci_stats
        import nova.conf
        import nova.conf.neutron
        nova.conf.neutron.register_dynamic_opts(nova.conf.CONF)
    import logging
    logging.disable(logging.CRITICAL)
    return {
        'objects': objects, 'CONF': nova.conf.CONF, 'exception': exception,
        'fields': fields, 'hardware': hardware, 'vconfig': vconfig,
        'driver': libvirt_driver, 'filter': numa_topology_filter,
        'host_manager': host_manager, 'pci_stats': pci_stats,
        'neutron_conf': nova.conf.neutron,
    }


N = None


def set_config(cfg):
    CONF = N['CONF']
    CONF.set_override('cpu_dedicated_set', cfg.get('cpu_dedicated_set'), group='compute')
    CONF.set_override('cpu_shared_set', cfg.get('cpu_shared_set'), group='compute')
    CONF.set_override('vcpu_pin_set', cfg.get('vcpu_pin_set'))
    CONF.set_override('packing_host_numa_cells_allocation_strategy',
                      bool(cfg.get('packing_host_numa_cells_allocation_strategy')), group='compute')
    reserved = []
    for r in cfg.get('reserved_huge_pages') or []:
        if isinstance(r, str):
            reserved.append(dict(p.split(':', 1) for p in r.split(',')))
        else:
            reserved.append({k: str(v) for k, v in r.items()})
    CONF.set_override('reserved_huge_pages', reserved or None)
    # NUMA-aware vSwitches: [neutron] physnets and the dynamic [neutron_physnet_*] groups.
    neutron = cfg.get('neutron') or {}
    physnets = neutron.get('physnets') or {}
    CONF.set_override('physnets', sorted(physnets), group='neutron')
    N['neutron_conf'].register_dynamic_opts(CONF)
    for name, nodes in physnets.items():
        CONF.set_override('numa_nodes', nodes, group='neutron_physnet_%s' % name)
    CONF.set_override('numa_nodes', neutron.get('tunnel') or [], group='neutron_tunnel')
    CONF.set_override('cpu_power_management', bool(cfg.get('cpu_power_management')),
                      group='libvirt')


class FakeHost:
    def __init__(self, caps, online, available):
        self.caps = caps
        self.online = set(online)
        self.available = set(available)

    def get_capabilities(self):
        return self.caps

    def get_online_cpus(self):
        return set(self.online)

    def get_available_cpus(self):
        return set(self.available)

    def has_min_version(self, *a, **k):
        return True


def host_topology(host, cfg):
    """LibvirtDriver._get_host_numa_topology on capabilities made of the host facts."""
    vc = N['vconfig']
    caps = vc.LibvirtConfigCaps()
    caps.host = vc.LibvirtConfigCapsHost()
    caps.host.cpu = vc.LibvirtConfigCPU()
    caps.host.cpu.arch = host.get('arch', 'x86_64')
    topo = vc.LibvirtConfigCapsNUMATopology()
    for c in host['cells']:
        cell = vc.LibvirtConfigCapsNUMACell()
        cell.id = c['id']
        cell.memory = c['memory_kb']
        sib_of = {}
        for s in c['siblings']:
            for cpu in s:
                sib_of[cpu] = set(s)
        for cpu in c['cpus']:
            x = vc.LibvirtConfigCapsNUMACPU()
            x.id = cpu
            x.socket_id = c.get('socket')
            x.core_id = cpu
            x.siblings = sib_of.get(cpu, {cpu})
            cell.cpus.append(x)
        base = host.get('base_page_kb', 4)
        huge = {int(k): int(v) for k, v in (c.get('hugepages') or {}).items()}
        pages = vc.LibvirtConfigCapsNUMAPages()
        pages.size = base
        pages.total = max(0, c['memory_kb'] - sum(k * v for k, v in huge.items())) // base
        cell.mempages.append(pages)
        for size in sorted(huge):
            p = vc.LibvirtConfigCapsNUMAPages()
            p.size = size
            p.total = huge[size]
            cell.mempages.append(p)
        topo.cells.append(cell)
    caps.host.topology = topo
    drv = object.__new__(N['driver'].LibvirtDriver)
    online = set(host['online']) - set(host.get('offline') or [])
    count = host.get('cpu_count')
    available = set(range(count)) if count is not None else online
    drv._host = FakeHost(caps, online, available)
    drv._reserved_hugepages = N['hardware'].numa_get_reserved_huge_pages()
    return drv._get_host_numa_topology()


def network_of(step):
    """The step's NetworkMetadata (the RequestSpec's), or None."""
    net = step.get('network')
    if not net:
        return None
    return N['objects'].NetworkMetadata(physnets=set(net['physnets']), tunneled=net['tunneled'])


def limits(cfg, step=None):
    lim = N['objects'].NUMATopologyLimits(
        cpu_allocation_ratio=float(cfg.get('cpu_allocation_ratio') or 4.0),
        ram_allocation_ratio=float(cfg.get('ram_allocation_ratio') or 1.0))
    net = network_of(step) if step else None
    if net:
        lim.network_metadata = net
    return lim


def flavor_of(step):
    f = step['flavor']
    return N['objects'].Flavor(
        id=1, flavorid='f', name=step.get('id', 'f'), vcpus=f['vcpus'],
        memory_mb=f['memory_mb'], root_gb=0, ephemeral_gb=0, swap=0,
        extra_specs=dict(f.get('extra_specs') or {}))


def image_of(step):
    return N['objects'].ImageMeta.from_dict(
        {'name': 'img', 'properties': dict(step.get('image_properties') or {})})


def cells_of(t):
    out = []
    for c in t.cells:
        out.append({
            'host_cell': c.id,
            'cpuset': sorted(c.cpuset),
            'pcpuset': sorted(c.pcpuset),
            'cpu_pinning': {str(k): v for k, v in (c.cpu_pinning or {}).items()},
            'cpuset_reserved': sorted(c.cpuset_reserved) if c.obj_attr_is_set('cpuset_reserved') and c.cpuset_reserved else None,
            'memory': c.memory,
            'pagesize': c.pagesize if c.obj_attr_is_set('pagesize') else None,
        })
    return out


def usage_of(host):
    return [{
        'id': c.id,
        'cpu_usage': c.cpu_usage,
        'memory_usage': c.memory_usage,
        'pinned_cpus': sorted(c.pinned_cpus),
        'pages_used': {str(p.size_kb): int(p.used) for p in c.mempages},
    } for c in host.cells]


def static_of(host):
    return [{
        'id': c.id,
        'socket': c.socket,
        'cpuset': sorted(c.cpuset),
        'pcpuset': sorted(c.pcpuset),
        'siblings': sorted(sorted(s) for s in c.siblings),
        'memory': c.memory,
        'mempages': [{'size_kb': p.size_kb, 'total': p.total, 'reserved': p.reserved} for p in c.mempages],
    } for c in host.cells]


def nocache_fit(host, req, lim, pack):
    """numa_fit_instance_to_host without its cache and without state kept between attempts:
    Nova's host cell order, then the first assignment (in permutation order) whose every pair
    Nova's _numa_fit_instance_cell accepts on fresh copies."""
    hw = N['hardware']
    fields = N['fields']
    cells = list(host.cells)
    n = len(req.cells)
    if len(cells) < n:
        return None
    if len(cells) > n:
        cells = sorted(cells, reverse=not pack, key=lambda c: c.avail_memory)
        if req.cells[0].cpu_policy in (None, fields.CPUAllocationPolicy.SHARED):
            cells = sorted(cells, reverse=pack, key=lambda c: c.cpu_usage)
        else:
            cells = sorted(cells, reverse=not pack, key=lambda c: len(c.free_pcpus))
    memo = {}

    def pair(g, h):
        key = (g, h)
        if key not in memo:
            reserved = 1 if (g == 0 and req.emulator_threads_isolated) else 0
            try:
                memo[key] = hw._numa_fit_instance_cell(
                    copy.deepcopy(cells[h]), copy.deepcopy(req.cells[g]), lim, reserved)
            except N['exception'].MemoryPageSizeNotSupported:
                memo[key] = None
        return memo[key]

    dead = set()

    net = lim.network_metadata if 'network_metadata' in lim else None

    def search(g, used, chosen):
        if g == n:
            if net and not hw._numa_cells_support_network_metadata(
                    host, [cells[h] for h in used], net):
                return None
            return list(chosen)
        if frozenset(used) in dead:
            return None
        for h in range(len(cells)):
            if h in used:
                continue
            got = pair(g, h)
            if got is None:
                continue
            used.add(h)
            chosen.append(got)
            r = search(g + 1, used, chosen)
            if r is not None:
                return r
            chosen.pop()
            used.discard(h)
        dead.add(frozenset(used))
        return None

    found = search(0, set(), [])
    if found is None:
        return None
    return N['objects'].InstanceNUMATopology(
        cells=found, emulator_threads_policy=req.emulator_threads_policy)


def filter_verdict(rtrack_host, step, cfg, req):
    """NUMATopologyFilter.host_passes on the ComputeNode topology rtrack reported."""
    objects = N['objects']
    hs = N['host_manager'].HostState('h', 'n', None)
    hs.numa_topology = objects.NUMATopology.obj_from_db_obj(rtrack_host)
    hs.cpu_allocation_ratio = float(cfg.get('cpu_allocation_ratio') or 4.0)
    hs.ram_allocation_ratio = float(cfg.get('ram_allocation_ratio') or 1.0)
    hs.pci_stats = N['pci_stats'].PciDeviceStats(hs.numa_topology)
    hs.limits = {}
    hs.allocation_candidates = [{'mappings': {}}]
    spec = objects.RequestSpec(
        flavor=flavor_of(step), image=image_of(step), numa_topology=req,
        pci_requests=None, instance_uuid='00000000-0000-4000-8000-000000000001')
    if network_of(step):
        spec.network_metadata = network_of(step)
    return bool(N['filter'].NUMATopologyFilter().host_passes(hs, spec))


def run_case(case):
    hw = N['hardware']
    cfg = case.get('config') or {}
    set_config(cfg)
    out = {'id': case['id'], 'steps': []}
    try:
        base = host_topology(case['host'], cfg)
    except Exception as e:  # a configuration Nova refuses
        out['host_error'] = '%s: %s' % (type(e).__name__, e)
        return out
    out['host'] = static_of(base)
    lim = limits(cfg)
    pack = bool(cfg.get('packing_host_numa_cells_allocation_strategy'))
    host = copy.deepcopy(base)
    live = {}      # id -> fitted topology
    moving = {}    # id -> new fitted topology (resize in progress)
    for step in case['steps']:
        op = step['op']
        r = {'op': op, 'id': step.get('id')}
        if op == 'resize' and (step['id'] not in live or step['id'] in moving):
            r['result'] = 'unknown'
        elif op in ('claim', 'check', 'resize'):
            try:
                req = hw.numa_get_constraints(flavor_of(step), image_of(step))
            except Exception as e:
                r['result'] = 'constraint_error'
                r['error'] = '%s: %s' % (type(e).__name__, e)
                r['usage'] = usage_of(host)
                out['steps'].append(r)
                continue
            if req is None:
                r['result'] = 'no_numa'
                r['usage'] = usage_of(host)
                out['steps'].append(r)
                continue
            if step.get('rtrack_host'):
                try:
                    r['filter'] = filter_verdict(step['rtrack_host'], step, cfg, copy.deepcopy(req))
                except Exception as e:
                    r['filter_error'] = '%s: %s' % (type(e).__name__, e)
            step_lim = limits(cfg, step)
            nc = nocache_fit(host, copy.deepcopy(req), step_lim, pack)
            r['nocache'] = {'result': 'fitted' if nc else 'refused', 'cells': cells_of(nc) if nc else None}
            fit = hw.numa_fit_instance_to_host(host, copy.deepcopy(req), None, limits=step_lim)
            if fit is None:
                r['result'] = 'refused'
            else:
                r['result'] = 'fitted'
                r['cells'] = cells_of(fit)
                if op != 'check':
                    try:
                        host = hw.numa_usage_from_instance_numa(host, fit)
                        if op == 'claim':
                            live[step['id']] = fit
                        else:
                            moving[step['id']] = fit
                    except Exception as e:
                        r['result'] = 'error'
                        r['error'] = '%s: %s' % (type(e).__name__, e)
        elif op in ('free', 'confirm', 'revert'):
            key = step['id']
            gone = None
            if op == 'free':
                gone = live.pop(key, None)
                if key in moving:
                    extra = moving.pop(key)
                    host = hw.numa_usage_from_instance_numa(host, extra, free=True)
            elif key not in moving:
                gone = None
            elif op == 'confirm':
                gone = live.pop(key, None)
                live[key] = moving.pop(key)
            else:
                gone = moving.pop(key, None)
            r['result'] = 'freed' if gone is not None else 'unknown'
            if gone is not None:
                host = hw.numa_usage_from_instance_numa(host, gone, free=True)
        elif op == 'audit':
            host = copy.deepcopy(base)
            for t in list(live.values()) + list(moving.values()):
                host = hw.numa_usage_from_instance_numa(host, t)
            r['result'] = 'audited'
        r['usage'] = usage_of(host)
        out['steps'].append(r)
    return out


def main():
    global N
    if len(sys.argv) != 2:
        print('usage: numa_diff.py CASES.json', file=sys.stderr)
        return 2
    N = load()
    with open(sys.argv[1]) as f:
        cases = json.load(f)['cases']
    for case in cases:
        try:
            res = run_case(case)
        except Exception as e:  # reported per case, the run goes on
            res = {'id': case.get('id'), 'crash': '%s: %s' % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(res) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
