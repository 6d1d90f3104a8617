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

# Trait -> /proc/cpuinfo flag, the inverse of rtrack's core/src/inventory/cpu_flag_traits.tsv (read
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
    present, power = _power_view(driver, online)
    return {
        'present': present,
        'power': power,
        'mdev': _mdev_view(driver),
        'mem_encryption': _mem_encryption_view(driver),
        'pmem': _pmem_view(),
        'online': online,
        'arch': cpu.arch or 'x86_64',
        'model': cpu.model or 'qemu64',
        'vendor': cpu.vendor or 'Intel',
        'memory_kb': int(resources['memory_mb']) * 1024,
        'cells': cells,
        'flags': sorted(flags),
        'pci': _pci_view(resources),
    }


def _power_view(driver: Any, online: list[int]) -> tuple[list[int], dict[str, Any]]:
    """CPU power management ([libvirt] cpu_power_management): the CPUs that exist (the
    driver counts dedicated CPUs among them, online or not) and, per CPU, whether Nova's
    power management has it online and its governor, as ``nova.virt.libvirt.cpu.core`` reads
    them (tests back it with a fake sysfs, SysFileSystemFixture)."""
    from nova import conf as nova_conf
    if not nova_conf.CONF.libvirt.cpu_power_management:
        return online, {}
    try:
        present = sorted(driver._host.get_available_cpus())
    except Exception:  # noqa
        present = list(online)
    from nova.virt.libvirt.cpu import core
    state: dict[str, Any] = {}
    for cpu in present:
        try:
            if not core.exists(cpu):
                continue
            is_online = bool(core.get_online(cpu))
        except Exception:  # noqa
            continue
        governor = None
        if is_online:
            try:
                governor = core.get_governor(cpu)
            except Exception:  # noqa
                governor = None
        state[str(cpu)] = [is_online, governor]
    return sorted(set(present) | set(online)), state


def _device_address(driver: Any, libvirt_name: str) -> str:
    try:
        addr = driver._get_device_address(libvirt_name)
    except Exception:  # noqa
        addr = None
    return addr or libvirt_name


def _mdev_view(driver: Any) -> dict[str, Any]:
    """mdev parents with their types (libvirt's availableInstances as is: the fake never
    lowers it, and Nova's VGPU total is existing mdevs + that) and the mdevs that exist."""
    parents = []
    try:
        capable = driver._get_mdev_capable_devices() or []
    except Exception:  # noqa
        capable = []
    for dev in capable:
        types = []
        for tid, t in sorted((dev.get('types') or {}).items()):
            types.append([tid, t.get('name'), t.get('deviceAPI'),
                          int(t.get('availableInstances') or 0)])
        parents.append({'address': _device_address(driver, dev['dev_id']),
                        'vendor_id': dev.get('vendor_id'), 'types': types})
    mdevs = []
    try:
        existing = driver._get_mediated_devices() or []
    except Exception:  # noqa
        existing = []
    for m in existing:
        mdevs.append([m['uuid'], _device_address(driver, m['parent']), m['type']])
    return {'parents': sorted(parents, key=lambda p: p['address']),
            'devices': sorted(mdevs)}


def _mem_encryption_view(driver: Any) -> dict[str, Any]:
    """AMD SEV (-ES, -SNP) and Intel TDX as the driver's host sees them (tests mock the
    kernel checks and capacities): kvm_amd/kvm_intel parameters and misc.capacity lines."""
    try:
        inv = driver._host.get_mem_encryption_inventories() or {}
    except Exception:  # noqa
        return {}
    out: dict[str, Any] = {}
    for model, param in (('amd_sev', 'sev'), ('amd_sev_es', 'sev_es'),
                         ('amd_sev_snp', 'sev_snp'), ('intel_tdx', 'tdx')):
        m = inv.get(model) or {}
        out[param] = bool(m.get('supported'))
        if m.get('supported'):
            out[param + '_total'] = int(m.get('total') or 0)
    return out


def _pmem_view() -> list[dict[str, Any]]:
    """The namespaces ``ndctl list`` shows the driver (tests mock
    ``nova.privsep.libvirt.get_pmem_namespaces``), when vPMEM is configured."""
    from nova import conf as nova_conf
    if not nova_conf.CONF.libvirt.pmem_namespaces:
        return []
    try:
        import nova.privsep.libvirt
        raw = nova.privsep.libvirt.get_pmem_namespaces()
        namespaces = json.loads(raw) if raw else []
    except Exception:  # noqa
        return []
    out = []
    for ns in namespaces:
        region = ns.get('daxregion') or {}
        devices = region.get('devices') or [{}]
        out.append({
            'dev': ns.get('dev'), 'name': ns.get('name'), 'mode': ns.get('mode'),
            'size': ns.get('size'), 'uuid': ns.get('uuid'),
            'numa_node': ns.get('numa_node'), 'align': region.get('align'),
            'region': region.get('id', 0), 'chardev': devices[0].get('chardev'),
            'dax_size': devices[0].get('size', ns.get('size')),
        })
    return out


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
    all_cpus = sorted(set(topo_cpus) | set(extra) | set(view.get('present') or []))
    power = view.get('power') or {}
    offline = {int(c) for c, (on, _g) in power.items() if not on}
    for name in ('possible', 'present'):
        _w('%s/cpu/%s' % (sysd, name), cpulist(all_cpus) + '\n')
    _w('%s/cpu/online' % sysd, cpulist(set(all_cpus) - offline) + '\n')
    for c, (on, governor) in power.items():
        if on and governor:
            _w('%s/cpu/cpu%s/cpufreq/scaling_governor' % (sysd, c), governor + '\n')
    extra = sorted(set(all_cpus) - set(topo_cpus))
    node_ids = [c['id'] for c in cells]
    for name in ('online', 'possible', 'has_cpu', 'has_memory', 'has_normal_memory'):
        _w('%s/node/%s' % (sysd, name), cpulist(node_ids) + '\n')
    flags = ' '.join(['fpu'] + [f for f in view['flags'] if f != 'fpu'])
    cpuinfo = []
    for c in cells:
        nid = c['id']
        nd = '%s/node/node%d' % (sysd, nid)
        _w(nd + '/cpulist', cpulist(cpu[0] for cpu in c['cpus'] if cpu[0] not in offline) + '\n')
        for cpu in c['cpus']:
            # the kernel keeps a node's cpu<N> links while the CPU is offline
            os.makedirs(nd, exist_ok=True)
            os.symlink('../../cpu/cpu%d' % cpu[0], '%s/cpu%d' % (nd, cpu[0]))
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
            if cpu_id in offline:
                # offline: the kernel removes its topology; no /proc/cpuinfo entry
                _w(cd + '/online', '0\n')
                os.makedirs('%s/node%d' % (cd, nid), exist_ok=True)
                continue
            _w(cd + '/online', '1\n')
            _w(cd + '/topology/physical_package_id', '%d\n' % sock)
            _w(cd + '/topology/core_id', '%d\n' % core)
            _w(cd + '/topology/thread_siblings_list', cpulist([x for x in sib if x not in offline] or [cpu_id]) + '\n')
            _w(cd + '/topology/core_cpus_list', cpulist([x for x in sib if x not in offline] or [cpu_id]) + '\n')
            os.makedirs('%s/node%d' % (cd, nid), exist_ok=True)
            cpuinfo.append(
                'processor\t: %d\nvendor_id\t: %s\nmodel name\t: %s\nphysical id\t: %d\n'
                'core id\t\t: %d\nflags\t\t: %s\n\n' % (
                    cpu_id, 'GenuineIntel' if view['vendor'] == 'Intel' else view['vendor'],
                    view['model'], sock, core, flags))
    for cpu_id in extra:
        cd = '%s/cpu/cpu%d' % (sysd, cpu_id)
        if cpu_id in offline:
            _w(cd + '/online', '0\n')
            continue
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
    _write_mdev(root, view.get('mdev') or {})
    _write_mem_encryption(root, view.get('mem_encryption') or {})
    _write_pmem(root, view.get('pmem') or [])


_KERNEL_MODE = {'devdax': 'dax', 'fsdax': 'memory', 'sector': 'safe', 'raw': 'raw'}


def _write_pmem(root: str, namespaces: list[dict[str, Any]]) -> None:
    """sys/bus/nd/devices/namespace<R>.<N> (and its dax<R>.<N> holder for devdax)."""
    if not namespaces:
        return
    bus = os.path.join(root, 'sys/bus/nd/devices')
    os.makedirs(bus, exist_ok=True)
    os.makedirs(os.path.join(root, 'sys/bus/nd/drivers/nd_pmem'), exist_ok=True)
    os.makedirs(os.path.join(root, 'sys/bus/dax/drivers/device_dax'), exist_ok=True)
    for ns in namespaces:
        dev = ns.get('dev')
        if not dev or not dev.startswith('namespace'):
            continue
        region_dir = os.path.join(root, 'sys/devices/ndbus0/region%s' % ns.get('region', 0))
        nsd = os.path.join(region_dir, dev)
        _w(nsd + '/devtype', 'nd_namespace_pmem\n')
        if ns.get('name'):
            _w(nsd + '/alt_name', '%s\n' % ns['name'])
        _w(nsd + '/mode', '%s\n' % _KERNEL_MODE.get(ns.get('mode') or 'raw', 'raw'))
        _w(nsd + '/size', '%d\n' % int(ns.get('size') or 0))
        _w(nsd + '/numa_node', '%d\n' % int(ns.get('numa_node') or 0))
        if ns.get('uuid'):
            _w(nsd + '/uuid', '%s\n' % ns['uuid'])
        os.symlink(os.path.relpath(os.path.join(root, 'sys/bus/nd/drivers/nd_pmem'), nsd),
                   os.path.join(nsd, 'driver'))
        os.symlink(os.path.relpath(nsd, bus), os.path.join(bus, dev))
        chardev = ns.get('chardev')
        if ns.get('mode') == 'devdax' and chardev:
            holder = chardev
            _w(nsd + '/holder', '%s\n' % holder)
            dax = os.path.join(region_dir, holder)
            _w(dax + '/size', '%d\n' % int(ns.get('dax_size') or 0))
            _w(dax + '/dax_region/align', '%d\n' % int(ns.get('align') or 0))
            inst = os.path.join(dax, chardev)
            _w(inst + '/dev', '252:0\n')
            os.symlink(os.path.relpath(os.path.join(root, 'sys/bus/dax/drivers/device_dax'),
                                       inst), os.path.join(inst, 'driver'))
            os.symlink(os.path.relpath(dax, bus), os.path.join(bus, holder))


def _write_mdev(root: str, mdev: dict[str, Any]) -> None:
    """sys/class/mdev_bus/<parent> -> the parent's directory with mdev_supported_types, and
    sys/bus/mdev/devices/<uuid> -> <parent dir>/<uuid> with its mdev_type link."""
    parents = mdev.get('parents') or []
    if not parents and not mdev.get('devices'):
        return
    devroot = os.path.join(root, 'sys/devices/pci0000:00')
    cls = os.path.join(root, 'sys/class/mdev_bus')
    os.makedirs(cls, exist_ok=True)
    dirs: dict[str, str] = {}
    for p in parents:
        addr = p['address']
        dd = os.path.join(devroot, addr)
        dirs[addr] = dd
        for tid, name, api, avail in p['types']:
            td = os.path.join(dd, 'mdev_supported_types', tid)
            _w(td + '/available_instances', '%d\n' % avail)
            _w(td + '/device_api', '%s\n' % (api or 'vfio-pci'))
            if name:
                _w(td + '/name', '%s\n' % name)
        os.makedirs(os.path.join(dd, 'mdev_supported_types'), exist_ok=True)
        os.symlink(os.path.relpath(dd, cls), os.path.join(cls, addr))
    bus = os.path.join(root, 'sys/bus/mdev/devices')
    os.makedirs(bus, exist_ok=True)
    for uuid, parent, tid in mdev.get('devices') or []:
        dd = dirs.get(parent) or os.path.join(devroot, parent)
        md = os.path.join(dd, uuid)
        os.makedirs(md, exist_ok=True)
        tdir = os.path.join(dd, 'mdev_supported_types', tid)
        os.makedirs(tdir, exist_ok=True)
        os.symlink(os.path.relpath(tdir, md), os.path.join(md, 'mdev_type'))
        os.symlink(os.path.relpath(md, bus), os.path.join(bus, uuid))


def _write_mem_encryption(root: str, enc: dict[str, Any]) -> None:
    """KVM's parameters and the misc cgroup's capacities."""
    if not enc:
        return
    yn = lambda b: 'Y\n' if b else 'N\n'  # noqa: E731
    for p in ('sev', 'sev_es', 'sev_snp'):
        _w(os.path.join(root, 'sys/module/kvm_amd/parameters', p), yn(enc.get(p)))
    _w(os.path.join(root, 'sys/module/kvm_intel/parameters/tdx'), yn(enc.get('tdx')))
    lines = []
    if enc.get('sev'):
        lines.append('sev %d' % enc.get('sev_total', 0))
    if enc.get('sev_es') or enc.get('sev_snp'):
        lines.append('sev_es %d' % max(enc.get('sev_es_total', 0),
                                       enc.get('sev_snp_total', 0)))
    if enc.get('tdx'):
        lines.append('tdx %d' % enc.get('tdx_total', 0))
    _w(os.path.join(root, 'sys/fs/cgroup/misc.capacity'), ''.join(l + '\n' for l in lines))
    os.makedirs(os.path.join(root, 'sys/class/misc'), exist_ok=True)
    if enc.get('sev'):
        os.makedirs(os.path.join(root, 'sys/class/misc/sev'), exist_ok=True)


def _card_serial(d: dict[str, Any]) -> Optional[str]:
    caps = d.get('capabilities') or {}
    if isinstance(caps, str):
        try:
            caps = json.loads(caps)
        except ValueError:
            caps = {}
    vpd = caps.get('vpd') if isinstance(caps, dict) else None
    sn = vpd.get('card_serial_number') if isinstance(vpd, dict) else None
    return str(sn) if sn else None


def vpd_image(serial: str) -> bytes:
    """PCI VPD with the serial number in VPD-R (identifier string, PN, SN, RV, end tag)."""
    ident = b'Fake NIC'
    out = bytearray([0x82]) + len(ident).to_bytes(2, 'little') + ident
    r = bytearray()
    for k, v in (('PN', 'FAKE0001'), ('SN', serial)):
        data = v.encode()[:255]
        r += k.encode() + bytes([len(data)]) + data
    r += b'RV\x01\x00'
    out += bytes([0x90]) + len(r).to_bytes(2, 'little') + r + bytes([0x78])
    return bytes(out)


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
    # The card serial number the driver reads from the PF's VPD (remote-managed ports): its
    # VFs carry it in their capabilities.
    serial_of: dict[str, str] = {}
    for d in devices:
        sn = _card_serial(d)
        if sn:
            serial_of.setdefault(d.get('parent_addr') if d.get('dev_type') != 'type-PF'
                                 else d['address'], sn)
    for d in devices:
        addr = d['address']
        dd = os.path.join(devroot, addr)
        if addr in serial_of:
            os.makedirs(dd, exist_ok=True)
            with open(dd + '/vpd', 'wb') as f:
                f.write(vpd_image(serial_of[addr]))
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
        elif d.get('dev_type') == 'type-PF':
            # a PF with no VF enabled is still SR-IOV capable
            _w(dd + '/sriov_totalvfs', '8\n')
            _w(dd + '/sriov_numvfs', '0\n')
        if d.get('dev_type') in ('type-VF', 'vdpa') and d.get('parent_addr') in by_addr:
            os.symlink('../%s' % d['parent_addr'], dd + '/physfn')
        ifname = d.get('parent_ifname') if d.get('dev_type') == 'type-PF' else None
        mac = d.get('mac_address')
        if d.get('dev_type') == 'type-PF' or mac:
            name = ifname or 'eth_%s' % addr.replace(':', '').replace('.', '')
            _w(dd + '/net/%s/address' % name, '%s\n' % (mac or '52:54:00:1e:59:c6'))
        os.makedirs(bus, exist_ok=True)
        os.symlink(os.path.relpath(dd, bus), os.path.join(bus, addr))
    # vDPA devices: the driver types a VF with a vdpa node device on it ``vdpa``; rtrackd
    # finds them on the vdpa bus (sys/bus/vdpa/devices/<name> -> .../<VF address>/<name>).
    vdpa_bus = os.path.join(root, 'sys/bus/vdpa/devices')
    drivers = os.path.join(root, 'sys/bus/vdpa/drivers/vhost_vdpa')
    vdpas = sorted(d['address'] for d in devices if d.get('dev_type') == 'vdpa')
    for idx, addr in enumerate(vdpas):
        os.makedirs(vdpa_bus, exist_ok=True)
        os.makedirs(drivers, exist_ok=True)
        name = 'vdpa%d' % idx
        vd = os.path.join(devroot, addr, name)
        os.makedirs(os.path.join(vd, 'vhost-vdpa-%d' % idx), exist_ok=True)
        os.symlink(os.path.relpath(drivers, vd), os.path.join(vd, 'driver'))
        os.symlink(os.path.relpath(vd, vdpa_bus), os.path.join(vdpa_bus, name))
