"""A sysfs/procfs tree that shows rtrackd the fake host Nova's libvirt driver sees.

The facts are taken from the driver's own answers (they go through every test-level mock),
not from what ``fakelibvirt.HostInfo`` means: the driver reports ``getInfo()``'s kB as MiB
(``memory_mb = 16780000`` on the default host), so ``/proc/meminfo`` says that many MiB; the
NUMA cells, their CPUs (socket, core, siblings), memory and page pools come from libvirt's
capabilities as the driver parses them; CPU flags are those whose traits the driver reports,
so that rtrackd's CPU-flag traits agree with the driver's.

:func:`host_view` builds a plain, comparable description; :func:`write_tree` writes it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Optional

# Trait -> /proc/cpuinfo flag, the inverse of rtrack's src/inventory/cpu_flag_traits.tsv (read
# from the repository when the package runs from it).
_TSV = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'src', 'inventory',
                    'cpu_flag_traits.tsv')
_TRAIT_FLAGS: Optional[dict[str, str]] = None


def trait_flags() -> dict[str, str]:
    global _TRAIT_FLAGS
    if _TRAIT_FLAGS is None:
        table: dict[str, str] = {}
        try:
            with open(_TSV) as f:
                for line in f:
                    if not line.strip() or line.startswith('#'):
                        continue
                    cols = line.rstrip('\n').split('\t')
                    if len(cols) >= 2:
                        table.setdefault(cols[1], cols[0])
        except OSError:
            pass
        _TRAIT_FLAGS = table
    return _TRAIT_FLAGS


def cpulist(ids: Any) -> str:
    ids = sorted(set(ids))
    out = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else '%d-%d' % (ids[i], ids[j]))
        i = j + 1
    return ','.join(out)


def host_view(driver: Any, resources: dict[str, Any]) -> dict[str, Any]:
    """What the fake host is, as the libvirt driver reports it (JSON-able, comparable)."""
    caps = driver._host.get_capabilities()
    cells = []
    topo = caps.host.topology
    for c in (topo.cells if topo else []):
        cells.append({
            'id': c.id,
            'memory_kb': int(c.memory),
            'pages': [[int(p.size), int(p.total)] for p in (c.mempages or [])],
            'cpus': [[cpu.id, cpu.socket_id, cpu.core_id, sorted(cpu.siblings or [cpu.id])]
                     for cpu in c.cpus],
        })
    flags = set()
    table = trait_flags()
    try:
        for trait, on in driver.static_traits.items():
            if on and trait in table:
                flags.add(table[trait])
    except Exception:  # noqa
        pass
    cpu = caps.host.cpu
    try:
        # Tests mock Host.get_online_cpus (0-15 whatever the host): the driver counts VCPU
        # and checks the CPU sets against it, so rtrackd must see those CPUs online too.
        online = sorted(driver._host.get_online_cpus())
    except Exception:  # noqa
        online = []
    return {
        'online': online,
        'arch': cpu.arch or 'x86_64',
        'model': cpu.model or 'qemu64',
        'vendor': cpu.vendor or 'Intel',
        'memory_kb': int(resources['memory_mb']) * 1024,
        'cells': cells,
        'flags': sorted(flags),
        'pci': _pci_view(resources),
    }


def _pci_view(resources: dict[str, Any]) -> list[dict[str, Any]]:
    raw = resources.get('pci_passthrough_devices')
    if not raw:
        return []
    out = []
    for d in json.loads(raw):
        out.append({k: d.get(k) for k in ('address', 'vendor_id', 'product_id', 'dev_type',
                                          'numa_node', 'parent_addr', 'label',
                                          'parent_ifname', 'capabilities')})
        extra = d.get('extra_info') or {}
        if isinstance(extra, str):
            try:
                extra = json.loads(extra)
            except ValueError:
                extra = {}
        out[-1]['mac_address'] = d.get('mac_address') or extra.get('mac_address')
    return out


def _w(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def write_tree(root: str, view: dict[str, Any]) -> None:
    """Writes ``root/sys`` and ``root/proc`` for ``view`` (an empty or absent ``root``)."""
    if os.path.exists(root):
        shutil.rmtree(root)
    sysd = os.path.join(root, 'sys/devices/system')
    cells = view['cells']
    topo_cpus = sorted(cpu[0] for c in cells for cpu in c['cpus'])
    # CPUs the driver counts online beyond libvirt's NUMA topology: online, in no node.
    extra = sorted(set(view.get('online') or []) - set(topo_cpus))
    all_cpus = sorted(set(topo_cpus) | set(extra))
    for name in ('online', 'possible', 'present'):
        _w('%s/cpu/%s' % (sysd, name), cpulist(all_cpus) + '\n')
    node_ids = [c['id'] for c in cells]
    for name in ('online', 'possible', 'has_cpu', 'has_memory', 'has_normal_memory'):
        _w('%s/node/%s' % (sysd, name), cpulist(node_ids) + '\n')
    flags = ' '.join(['fpu'] + [f for f in view['flags'] if f != 'fpu'])
    cpuinfo = []
    for c in cells:
        nid = c['id']
        nd = '%s/node/node%d' % (sysd, nid)
        _w(nd + '/cpulist', cpulist(cpu[0] for cpu in c['cpus']) + '\n')
        huge_kb = sum(size * total for size, total in c['pages'] if size != 4)
        mem_kb = c['memory_kb']
        _w(nd + '/meminfo',
           'Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB\n'
           'Node %d MemUsed:        %d kB\n' % (nid, mem_kb, nid, max(mem_kb - huge_kb, 0),
                                                nid, huge_kb))
        for size, total in c['pages']:
            if size == 4:
                continue
            hp = '%s/hugepages/hugepages-%dkB' % (nd, size)
            _w(hp + '/nr_hugepages', '%d\n' % total)
            _w(hp + '/free_hugepages', '%d\n' % total)
            _w(hp + '/surplus_hugepages', '0\n')
        for cpu_id, sock, core, sib in c['cpus']:
            cd = '%s/cpu/cpu%d' % (sysd, cpu_id)
            _w(cd + '/online', '1\n')
            _w(cd + '/topology/physical_package_id', '%d\n' % sock)
            _w(cd + '/topology/core_id', '%d\n' % core)
            _w(cd + '/topology/thread_siblings_list', cpulist(sib) + '\n')
            _w(cd + '/topology/core_cpus_list', cpulist(sib) + '\n')
            os.makedirs('%s/node%d' % (cd, nid), exist_ok=True)
            cpuinfo.append(
                'processor\t: %d\nvendor_id\t: %s\nmodel name\t: %s\nphysical id\t: %d\n'
                'core id\t\t: %d\nflags\t\t: %s\n\n' % (
                    cpu_id, 'GenuineIntel' if view['vendor'] == 'Intel' else view['vendor'],
                    view['model'], sock, core, flags))
    for cpu_id in extra:
        cd = '%s/cpu/cpu%d' % (sysd, cpu_id)
        _w(cd + '/online', '1\n')
        _w(cd + '/topology/physical_package_id', '0\n')
        _w(cd + '/topology/core_id', '%d\n' % (1000 + cpu_id))
        _w(cd + '/topology/thread_siblings_list', '%d\n' % cpu_id)
        _w(cd + '/topology/core_cpus_list', '%d\n' % cpu_id)
    page_sizes = sorted({size for c in cells for size, _t in c['pages'] if size != 4})
    for size in page_sizes:
        os.makedirs(os.path.join(root, 'sys/kernel/mm/hugepages/hugepages-%dkB' % size),
                    exist_ok=True)
    _w(os.path.join(root, 'proc/cpuinfo'), ''.join(cpuinfo))
    mem = view['memory_kb']
    _w(os.path.join(root, 'proc/meminfo'),
       'MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n'
       'Hugepagesize:       2048 kB\n' % (mem, mem, mem))
    _w(os.path.join(root, 'proc/sys/kernel/arch'), view['arch'] + '\n')
    os.makedirs(os.path.join(root, 'sys/bus/pci/devices'), exist_ok=True)
    _write_pci(root, view.get('pci') or [])


def _write_pci(root: str, devices: list[dict[str, Any]]) -> None:
    """PCI functions as the driver reports them (type-PCI, PFs with their VFs)."""
    if not devices:
        return
    devroot = os.path.join(root, 'sys/devices/pci0000:00')
    bus = os.path.join(root, 'sys/bus/pci/devices')
    vfs_of: dict[str, list[str]] = {}
    for d in devices:
        if d.get('dev_type') in ('type-VF', 'vdpa') and d.get('parent_addr'):
            vfs_of.setdefault(d['parent_addr'], []).append(d['address'])
    by_addr = {d['address']: d for d in devices}
    for d in devices:
        addr = d['address']
        dd = os.path.join(devroot, addr)
        _w(dd + '/vendor', '0x%s\n' % d['vendor_id'])
        _w(dd + '/device', '0x%s\n' % d['product_id'])
        _w(dd + '/class', '0x020000\n' if d['dev_type'] != 'type-PCI' else '0x030000\n')
        numa = d.get('numa_node')
        _w(dd + '/numa_node', '%d\n' % (numa if numa is not None else -1))
        if addr in vfs_of:
            vfs = sorted(vfs_of[addr])
            _w(dd + '/sriov_totalvfs', '%d\n' % len(vfs))
            _w(dd + '/sriov_numvfs', '%d\n' % len(vfs))
            for i, vf in enumerate(vfs):
                os.symlink('../%s' % vf, dd + '/virtfn%d' % i)
        if d.get('dev_type') in ('type-VF', 'vdpa') and d.get('parent_addr') in by_addr:
            os.symlink('../%s' % d['parent_addr'], dd + '/physfn')
        ifname = d.get('parent_ifname') if d.get('dev_type') == 'type-PF' else None
        mac = d.get('mac_address')
        if d.get('dev_type') == 'type-PF' or mac:
            name = ifname or 'eth_%s' % addr.replace(':', '').replace('.', '')
            _w(dd + '/net/%s/address' % name, '%s\n' % (mac or '52:54:00:1e:59:c6'))
        os.makedirs(bus, exist_ok=True)
        os.symlink(os.path.relpath(dd, bus), os.path.join(bus, addr))
