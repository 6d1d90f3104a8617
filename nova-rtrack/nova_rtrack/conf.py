"""One configuration: the options nova.conf and rtrack.toml share come from nova.conf.

- :func:`register_opts` adds nova.conf's ``[rtrack]`` group (the socket, the timeout, the
  rtrack.toml to check).
- :func:`derive` maps nova.conf (``CONF``) to rtrack.toml's keys, as docs/nova-conf.md lists
  them: a nested dict, written by :func:`dumps_toml`.
- :func:`mismatches` compares what nova.conf says with an operator's rtrack.toml, key by key,
  naming the nova.conf option; nova-compute refuses to start on a mismatch
  (:func:`check_file`).

Nothing here imports Nova at module import time except through the ``conf`` argument, so the
mapping can be unit-tested with a private ``ConfigOpts``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Optional

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None  # type: ignore[assignment]

from oslo_config import cfg

RTRACK_GROUP = 'rtrack'

rtrack_opts = [
    cfg.StrOpt('socket', default='/run/rtrack/rtrack.sock',
               help="rtrackd's API socket ([api] socket of rtrack.toml)."),
    cfg.FloatOpt('timeout', default=20.0, min=0.1,
                 help='Seconds a call to rtrackd may take before the claim fails '
                      '(keep it below rtrackd\'s [api] request_timeout_s).'),
    cfg.StrOpt('config_file', default='/etc/rtrack/rtrack.toml',
               help="rtrackd's configuration; checked against nova.conf at start."),
    cfg.BoolOpt('check_config', default=True,
                help='Refuse to start when rtrack.toml and nova.conf disagree on an option '
                     'they share.'),
    cfg.BoolOpt('refresh_on_periodic', default=True,
                help='Ask rtrackd to audit and report (POST /v1/refresh) at every '
                     'update_available_resource periodic.'),
    cfg.BoolOpt('disk_from_driver', default=False,
                help="Send the virt driver's DISK_GB totals (local_gb, local_gb_used, "
                     'disk_available_least) with every refresh, for rtrack.toml\'s '
                     '[host] disk_source = "caller" (image backends that are not the '
                     "instances path's filesystem: rbd, LVM)."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    try:
        conf.register_opts(rtrack_opts, group=RTRACK_GROUP)
    except cfg.DuplicateOptError:
        pass


# Each row: (rtrack key path, nova.conf option as operators write it, getter).
# The getter takes CONF and returns the value in rtrack's form, or None when unset.

def _opt(conf: cfg.ConfigOpts, group: Optional[str], name: str) -> Any:
    try:
        g = getattr(conf, group) if group else conf
        return getattr(g, name)
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError):
        return None


def _ratio(conf: cfg.ConfigOpts, name: str) -> Optional[float]:
    v = _opt(conf, None, name)
    # Nova treats 0.0 as unset (compatibility with pre-Stein defaults).
    if v in (None, 0.0):
        return None
    return float(v)


def _huge_pages(conf: cfg.ConfigOpts) -> Optional[list[str]]:
    v = _opt(conf, None, 'reserved_huge_pages')
    if not v:
        return None
    out = []
    for d in v:
        out.append(','.join('%s:%s' % (k, d[k]) for k in ('node', 'size', 'count') if k in d))
    return out


def _json_entries(values: Optional[Iterable[str]]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for raw in values or []:
        parsed = json.loads(raw)
        if isinstance(parsed, list):
            entries.extend(parsed)
        else:
            entries.append(parsed)
    return entries


def _pci_spec(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in entry.items():
        if k == 'address' and isinstance(v, dict):
            out[k] = {kk: str(vv) for kk, vv in v.items()}
        elif isinstance(v, (str, bool)):
            out[k] = v
        elif v is None:
            continue
        else:
            out[k] = str(v)
    return out


def derive(conf: cfg.ConfigOpts, *, host: Optional[str] = None,
           hypervisor_hostname: Optional[str] = None,
           compute_node_uuid: Optional[str] = None,
           include_placement: bool = True) -> dict[str, Any]:
    """rtrack.toml's shared keys as nova.conf sets them (a nested dict).

    Only what nova.conf decides is here; per-daemon keys (root, state_dir, socket, the
    Placement credentials of a test harness) are the caller's to add.
    """
    host_s: dict[str, Any] = {}
    res: dict[str, Any] = {}
    out: dict[str, Any] = {'host': host_s, 'resources': res}
    if host or _opt(conf, None, 'host'):
        host_s['host'] = host or _opt(conf, None, 'host')
    if hypervisor_hostname:
        host_s['hypervisor_hostname'] = hypervisor_hostname
    if compute_node_uuid:
        host_s['compute_node_uuid'] = compute_node_uuid
    if _opt(conf, None, 'my_ip'):
        host_s['host_ip'] = _opt(conf, None, 'my_ip')
    if _opt(conf, None, 'instances_path'):
        host_s['instances_path'] = _opt(conf, None, 'instances_path')

    for name in ('reserved_host_cpus', 'reserved_host_memory_mb', 'reserved_host_disk_mb'):
        v = _opt(conf, None, name)
        if v is not None:
            res[name] = int(v)
    for kind in ('cpu', 'ram', 'disk'):
        r = _ratio(conf, '%s_allocation_ratio' % kind)
        if r is not None:
            res['%s_allocation_ratio' % kind] = r
        ir = _opt(conf, None, 'initial_%s_allocation_ratio' % kind)
        if ir is not None:
            res['initial_%s_allocation_ratio' % kind] = float(ir)
    for name in ('cpu_dedicated_set', 'cpu_shared_set'):
        v = _opt(conf, 'compute', name)
        if v:
            res[name] = v
    # Deprecated, still honoured by Nova 34 (and by rtrackd: VCPU is those CPUs, pinned guests
    # pin from them as VCPU); refused beside cpu_dedicated_set by both.
    if _opt(conf, None, 'vcpu_pin_set'):
        res['vcpu_pin_set'] = _opt(conf, None, 'vcpu_pin_set')
    hp = _huge_pages(conf)
    if hp:
        res['reserved_huge_pages'] = hp
    packing = _opt(conf, 'compute', 'packing_host_numa_cells_allocation_strategy')
    if packing is not None:
        res['packing_host_numa_cells_allocation_strategy'] = bool(packing)
    pcl = _opt(conf, 'compute', 'provider_config_location')
    if pcl:
        res['provider_config_location'] = pcl

    if _opt(conf, 'libvirt', 'cpu_power_management'):
        res['cpu_power_management'] = True
        for name in ('cpu_power_management_strategy', 'cpu_power_governor_low',
                     'cpu_power_governor_high'):
            v = _opt(conf, 'libvirt', name)
            if v:
                res[name] = v

    pci: dict[str, Any] = {}
    specs = [_pci_spec(e) for e in _json_entries(_opt(conf, 'pci', 'device_spec'))]
    if specs:
        pci['device_spec'] = specs
    aliases = [_pci_spec(e) for e in _json_entries(_opt(conf, 'pci', 'alias'))]
    if aliases:
        pci['alias'] = aliases
    rip = _opt(conf, 'pci', 'report_in_placement')
    if rip:
        pci['report_in_placement'] = True
    if pci:
        out['pci'] = pci

    devices: dict[str, Any] = {}
    types = list(_opt(conf, 'devices', 'enabled_mdev_types') or [])
    if types:
        devices['enabled_mdev_types'] = types
        mdev: dict[str, Any] = {}
        for t in types:
            g = 'mdev_%s' % t
            entry: dict[str, Any] = {}
            addrs = _opt(conf, g, 'device_addresses')
            if addrs:
                entry['device_addresses'] = list(addrs)
            mc = _opt(conf, g, 'mdev_class')
            if mc and mc != 'VGPU':
                entry['mdev_class'] = mc
            mi = _opt(conf, g, 'max_instances')
            if mi:
                entry['max_instances'] = int(mi)
            mdev[t] = entry
        out['mdev'] = mdev
    cpu_mode = _opt(conf, 'libvirt', 'cpu_mode')
    if cpu_mode:
        devices['cpu_mode'] = cpu_mode
    tdx = _opt(conf, 'libvirt', 'num_intel_tdx_guests')
    if tdx is not None:
        devices['num_intel_tdx_guests'] = int(tdx)
    pmem = [e for e in (_opt(conf, 'libvirt', 'pmem_namespaces') or []) if e]
    if pmem:
        devices['pmem_namespaces'] = list(pmem)
    if devices:
        out['devices'] = devices

    out.update(_neutron(conf))

    interval = _opt(conf, None, 'update_resources_interval')
    if interval and interval > 0:
        out['audit'] = {'interval_s': int(interval)}

    if include_placement:
        pl: dict[str, Any] = {}
        ep = _opt(conf, 'placement', 'endpoint_override')
        if ep:
            pl['endpoint'] = ep
        auth_type = _opt(conf, 'placement', 'auth_type')
        if auth_type in ('password', 'v3password'):
            pl['auth'] = 'password'
        elif auth_type in ('v3applicationcredential',):
            pl['auth'] = 'application_credential'
        for k in ('auth_url', 'username', 'user_id', 'password', 'project_name', 'project_id',
                  'user_domain_name', 'user_domain_id', 'project_domain_name',
                  'project_domain_id', 'application_credential_id',
                  'application_credential_name', 'application_credential_secret',
                  'region_name'):
            v = _opt(conf, 'placement', k)
            if v:
                pl[k] = v
        vi = _opt(conf, 'placement', 'valid_interfaces')
        if vi:
            pl['interface'] = ','.join(vi)
        to = _opt(conf, 'placement', 'timeout')
        if to:
            pl['timeout_s'] = int(to)
        rpar = _opt(conf, 'compute', 'resource_provider_association_refresh')
        if rpar is not None:
            pl['refresh_interval_s'] = int(rpar)
        if pl:
            out['placement'] = pl
    return {k: v for k, v in out.items() if v}


def _neutron(conf: cfg.ConfigOpts) -> dict[str, Any]:
    """NUMA-aware vSwitches: ``[neutron] physnets``, ``[neutron_physnet_<name>] numa_nodes``
    (dynamic groups, registered by ``nova.conf.neutron.register_dynamic_opts``) and
    ``[neutron_tunnel] numa_nodes``, as rtrack's ``[neutron]``, ``[neutron_physnet.<name>]``
    and ``[neutron_tunnel]``. A physnet whose group is not registered or has no nodes is
    written with an empty list: rtrackd refuses it naming the option, as Nova's driver does.
    """
    out: dict[str, Any] = {}
    physnets = [p for p in (_opt(conf, 'neutron', 'physnets') or []) if p]
    if physnets:
        out['neutron'] = {'physnets': list(physnets)}
        out['neutron_physnet'] = {
            p: {'numa_nodes': [int(n) for n in
                               (_opt(conf, 'neutron_physnet_%s' % p, 'numa_nodes') or [])]}
            for p in physnets}
    tunnel = _opt(conf, 'neutron_tunnel', 'numa_nodes')
    if tunnel:
        out['neutron_tunnel'] = {'numa_nodes': [int(n) for n in tunnel]}
    return out


# Where each rtrack key comes from in nova.conf, for messages.
NOVA_OPTION = {
    'host.host': '[DEFAULT] host',
    'host.host_ip': '[DEFAULT] my_ip',
    'host.instances_path': '[DEFAULT] instances_path',
    'resources.reserved_host_cpus': '[DEFAULT] reserved_host_cpus',
    'resources.reserved_host_memory_mb': '[DEFAULT] reserved_host_memory_mb',
    'resources.reserved_host_disk_mb': '[DEFAULT] reserved_host_disk_mb',
    'resources.reserved_huge_pages': '[DEFAULT] reserved_huge_pages',
    'resources.cpu_allocation_ratio': '[DEFAULT] cpu_allocation_ratio',
    'resources.ram_allocation_ratio': '[DEFAULT] ram_allocation_ratio',
    'resources.disk_allocation_ratio': '[DEFAULT] disk_allocation_ratio',
    'resources.initial_cpu_allocation_ratio': '[DEFAULT] initial_cpu_allocation_ratio',
    'resources.initial_ram_allocation_ratio': '[DEFAULT] initial_ram_allocation_ratio',
    'resources.initial_disk_allocation_ratio': '[DEFAULT] initial_disk_allocation_ratio',
    'resources.cpu_dedicated_set': '[compute] cpu_dedicated_set',
    'resources.cpu_shared_set': '[compute] cpu_shared_set',
    'resources.vcpu_pin_set': '[DEFAULT] vcpu_pin_set',
    'resources.packing_host_numa_cells_allocation_strategy':
        '[compute] packing_host_numa_cells_allocation_strategy',
    'resources.provider_config_location': '[compute] provider_config_location',
    'pci.device_spec': '[pci] device_spec',
    'pci.alias': '[pci] alias',
    'pci.report_in_placement': '[pci] report_in_placement',
    'devices.enabled_mdev_types': '[devices] enabled_mdev_types',
    'devices.cpu_mode': '[libvirt] cpu_mode',
    'devices.num_intel_tdx_guests': '[libvirt] num_intel_tdx_guests',
    'devices.pmem_namespaces': '[libvirt] pmem_namespaces',
    'resources.cpu_power_management': '[libvirt] cpu_power_management',
    'resources.cpu_power_management_strategy': '[libvirt] cpu_power_management_strategy',
    'resources.cpu_power_governor_low': '[libvirt] cpu_power_governor_low',
    'resources.cpu_power_governor_high': '[libvirt] cpu_power_governor_high',
    'neutron.physnets': '[neutron] physnets',
    'neutron_tunnel.numa_nodes': '[neutron_tunnel] numa_nodes',
    'audit.interval_s': '[DEFAULT] update_resources_interval',
}

# rtrack's defaults for keys nova.conf may leave unset (so that "unset" and "the default"
# compare equal).
RTRACK_DEFAULTS = {
    'resources.reserved_host_cpus': 0,
    'resources.reserved_host_memory_mb': 512,
    'resources.reserved_host_disk_mb': 0,
    'resources.initial_cpu_allocation_ratio': 4.0,
    'resources.initial_ram_allocation_ratio': 1.0,
    'resources.initial_disk_allocation_ratio': 1.0,
    'resources.packing_host_numa_cells_allocation_strategy': False,
    'resources.provider_config_location': '/etc/nova/provider_config',
    'pci.report_in_placement': False,
    'host.instances_path': '/var/lib/nova/instances',
    'audit.interval_s': 60,
    'resources.cpu_power_management': False,
    'resources.cpu_power_management_strategy': 'cpu_state',
    'resources.cpu_power_governor_low': 'powersave',
    'resources.cpu_power_governor_high': 'performance',
}

# Keys compared at start. The [placement] credentials and per-host identity are not: an
# operator may give rtrackd its own service user.
CHECKED = [k for k in NOVA_OPTION if not k.startswith('host.host')]


def unsupported(conf: cfg.ConfigOpts) -> list[str]:
    """nova.conf options rtrack cannot honour, each as a sentence naming the option."""
    out: list[str] = []
    return out


def _flat(d: dict[str, Any], prefix: str = '') -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = '%s.%s' % (prefix, k) if prefix else k
        if isinstance(v, dict) and not key.startswith('pci.') and key not in (
                'mdev', 'neutron_physnet'):
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out


def _norm(key: str, v: Any) -> Any:
    if v is None:
        return RTRACK_DEFAULTS.get(key)
    if key == 'resources.reserved_huge_pages' and isinstance(v, list):
        norm = []
        for e in v:
            if isinstance(e, dict):
                e = ','.join('%s:%s' % (k, e[k]) for k in ('node', 'size', 'count') if k in e)
            norm.append(e)
        return sorted(norm)
    if key == 'devices.pmem_namespaces' and isinstance(v, list):
        # Nova's list option splits on commas; rtrack also takes one entry holding them all.
        return sorted(p.strip() for e in v for p in str(e).split(',') if p.strip())
    if key in ('neutron.physnets', 'neutron_tunnel.numa_nodes') and isinstance(v, list):
        return sorted(v) or None
    if key in ('host.instances_path', 'resources.provider_config_location') and \
            isinstance(v, str) and len(v) > 1:
        return v.rstrip('/')
    return v


def mismatches(derived: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Sentences naming each nova.conf option whose value rtrack.toml contradicts."""
    d = _flat(derived)
    a = _flat(actual)
    out = []
    for key in CHECKED:
        want = _norm(key, d.get(key))
        have = _norm(key, a.get(key))
        if key == 'resources.reserved_host_disk_mb' and want is not None and have is not None:
            # rtrack rounds up to whole GiB, as Nova does: equal when the GiB are equal.
            if math.ceil(want / 1024) == math.ceil(have / 1024):
                continue
        if want != have:
            out.append('%s = %s in nova.conf, but rtrack.toml has %s = %s' % (
                NOVA_OPTION[key], _show(want), key, _show(have)))
    # [mdev_<type>] groups
    want_m = derived.get('mdev', {})
    have_m = actual.get('mdev', {})
    for t in sorted(set(want_m) | set(have_m)):
        if want_m.get(t, {}) != have_m.get(t, {}):
            out.append('[mdev_%s] in nova.conf is %s, but rtrack.toml [mdev.%s] is %s' % (
                t, _show(want_m.get(t)), t, _show(have_m.get(t))))
    # [neutron_physnet_<name>] groups
    want_p = derived.get('neutron_physnet', {})
    have_p = actual.get('neutron_physnet', {})
    for p in sorted(set(want_p) | set(have_p)):
        w = sorted((want_p.get(p) or {}).get('numa_nodes') or [])
        h = sorted((have_p.get(p) or {}).get('numa_nodes') or [])
        if w != h:
            out.append('[neutron_physnet_%s] numa_nodes = %s in nova.conf, but rtrack.toml '
                       'has neutron_physnet.%s.numa_nodes = %s' % (
                           p, _show(w if p in want_p else None), p,
                           _show(h if p in have_p else None)))
    return out


def required_under_nova_compute(actual: dict[str, Any]) -> list[str]:
    """rtrack.toml keys that must have one value when nova-compute runs on rtrack.

    nova-compute's virt driver writes the hypervisor traits (CPU features, arch,
    COMPUTE_STATUS_DISABLED) and Nova's scheduler writes the allocations: rtrackd must leave
    both alone, or two writers flap.
    """
    pl = actual.get('placement')
    if not isinstance(pl, dict):
        return []
    out = []
    if pl.get('hypervisor_traits', 'rtrack') != 'nova-compute':
        out.append('rtrack.toml has placement.hypervisor_traits = %s; nova-compute on rtrack '
                   'needs "nova-compute" (its virt driver sets the hypervisor traits)' % (
                       _show(pl.get('hypervisor_traits'))))
    if pl.get('report_allocations', False):
        out.append('rtrack.toml has placement.report_allocations = true; nova-compute on '
                   "rtrack needs false (allocations are Nova's scheduler's)")
    return out


def _show(v: Any) -> str:
    if v is None:
        return '(unset)'
    return json.dumps(v, sort_keys=True)


def load_toml(path: str) -> dict[str, Any]:
    with open(path, 'rb') as f:
        return tomllib.load(f)


def check_file(conf: cfg.ConfigOpts, path: str) -> list[str]:
    """Problems between nova.conf and the rtrack.toml at ``path`` (empty: consistent)."""
    problems = unsupported(conf)
    actual = load_toml(path)
    problems += mismatches(derive(conf, include_placement=False), actual)
    problems += required_under_nova_compute(actual)
    return problems


# -- a small TOML writer (tomllib only reads) ------------------------------------------------

_BARE = re.compile(r'^[A-Za-z0-9_-]+$')


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if ('.' in r or 'e' in r or 'inf' in r or 'nan' in r) else r + '.0'
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return '[' + ', '.join(_value(x) for x in v) + ']'
    if isinstance(v, dict):
        return '{' + ', '.join('%s = %s' % (_key(k), _value(x)) for k, x in v.items()) + '}'
    raise TypeError('cannot write %r as TOML' % (v,))


def dumps_toml(data: dict[str, Any]) -> str:
    """TOML for a nested dict: tables, arrays of tables, scalars and lists of scalars."""
    lines: list[str] = []

    def table(path: list[str], d: dict[str, Any]) -> None:
        scalars = [(k, v) for k, v in d.items()
                   if not isinstance(v, dict) and not _is_table_array(v)]
        subtables = [(k, v) for k, v in d.items() if isinstance(v, dict)]
        arrays = [(k, v) for k, v in d.items() if _is_table_array(v)]
        if path and (scalars or not (subtables or arrays)):
            lines.append('[%s]' % '.'.join(_key(p) for p in path))
        for k, v in scalars:
            lines.append('%s = %s' % (_key(k), _value(v)))
        if scalars:
            lines.append('')
        for k, v in arrays:
            for item in v:
                lines.append('[[%s]]' % '.'.join(_key(p) for p in path + [k]))
                for ik, iv in item.items():
                    lines.append('%s = %s' % (_key(ik), _value(iv)))
                lines.append('')
        for k, v in subtables:
            table(path + [k], v)

    table([], data)
    return '\n'.join(lines).rstrip() + '\n'


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``, tables merged key by key."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def disk_totals(resources: dict[str, Any]) -> Optional[dict[str, int]]:
    """The driver's DISK_GB totals in the shape of rtrackd's ``disk_gb`` (GiB; Nova's
    ``disk_available_least`` may be negative when disks are overcommitted: 0 then)."""
    total = resources.get('local_gb')
    if total is None:
        return None
    total = max(0, int(total))
    used = min(total, max(0, int(resources.get('local_gb_used') or 0)))
    free = resources.get('disk_available_least')
    if free is None:
        free = total - used
    return {'total': total, 'used': used, 'free': min(total, max(0, int(free)))}
