#!/usr/bin/env python3
"""Real Nova 34's answers to PCI scenarios, for the differential test of rtrack's PCI tracker.

Run: target/nova-functional-venv/bin/python tests/interop/pci_diff.py CASES.json   (or --selftest)

Input: a JSON file {"cases": [case, ...]}. A case:
  {"id": "...",
   "report_in_placement": false,         # [pci]report_in_placement
   "pci_in_placement": null|bool,        # [filter_scheduler]pci_in_placement (alias validation);
                                         #   null/absent = the value of report_in_placement
   "device_spec": [{...}, ...],          # [pci]device_spec entries (dicts, JSON-encoded for Nova)
   "alias": [{...}, ...],                # [pci]alias entries
   "host_cells": [{"id", "socket", "cpuset"?, "memory"?}, ...],   # [] = no NUMA topology
   "devices": [{"address", "vendor_id", "product_id", "dev_type", "parent_addr", "numa_node",
                "label"?, "dev_id"?, "parent_ifname"?, "capabilities"?, "rp_uuid"?}, ...],
   "steps": [step, ...]}
  A request: {"count", "spec": [{...}], "alias_name", "request_id", "requester_id", "numa_policy"}
  (absent alias_name/request_id/requester_id = null; absent numa_policy = unset; spec values
  may carry "rp_uuids": "u1,u1,u2", passed through).  Steps ("op"):
   claim       {instance, requests, flavor_alias, flavor_numa_policy, numa_cells}
               ResourceTracker.instance_claim's PCI part: PciDevTracker.claim_instance(ctx,
               InstancePCIRequests, InstanceNUMATopology) then update_pci_for_instance(sign=1)
               (= allocate_instance), then the RT _update (placement sync + save). NOT run first
               unless the step says "test_pci": true: claims.Claim._test_pci (support_requests),
               so a failing claim shows what claim_instance itself leaves behind. With
               "test_pci": true the claim runs Claim._test_pci first, as RT.instance_claim does
               through Claim._claim_test: when it fails, ComputeResourcesUnavailable is raised
               and nothing is claimed.
   claim_only  same fields: RT.claim_pci_devices (claim_instance + save); live-migration dest.
   allocate    {instance}: RT.allocate_pci_devices_for_instance (allocate_instance + save).
   check       same fields as claim: PciDeviceStats.support_requests(reqs, None, cells) (the
               scheduler's test); also "claimable": what PciDevTracker.claim_instance itself
               does with the same requests and cells on a deep copy of the tracker (its PF/VF
               links rebuilt by PciDevTracker._build_device_tree, as NovaObject deep copies keep
               fields only; nothing of it is kept): {"ok", "error", "devices"} (devices as for
               claim); with "test_pci": true, after Claim._test_pci as for claim.
   free        {instance}: update_pci_for_instance(sign=-1) (= free_instance) + RT _update.
   free_claims {instance}: RT.free_pci_device_claims_for_instance (free_instance_claims + save).
   free_request {instance, request_index}: ComputeManager._detach_interface: the first of
               instance.pci_devices whose request_id is that of the instance's n-th request goes
               to RT.unclaim_pci_devices (free_device + save), then
               Instance.remove_pci_device_and_request. Like Nova, ONE device (a port has count
               1); none if the request holds no device. n counts every request given to the
               instance by claim/claim_only/attach steps (failed ones too), in order; never shifts.
   attach      {instance, requests}: ComputeManager._claim_pci_device_for_interface_attach
               (RT.claim_pci_devices, PciDeviceRequestFailed -> InterfaceAttachPciClaimFailed,
               devices[0] appended to instance.pci_devices) then
               RT.allocate_pci_devices_for_instance.
   restart     a new PciDevTracker(ctx, compute_node) reading the saved rows, then
               update_devices_from_hypervisor_resources(devices) and the startup _update
               (placement sync + save). Instances' pci_devices are reloaded from the saved rows
               (PciDeviceList.get_by_instance_uuid). Instances are not re-allocated.
   periodic    update_devices_from_hypervisor_resources(devices) + RT _update.
  Flavor aliases: hardware.get_pci_numa_policy_constraint on a flavor with extra_specs
  {"pci_passthrough:alias": flavor_alias, "hw:pci_numa_affinity_policy": flavor_numa_policy},
  then request.get_pci_requests_from_flavor(flavor, affinity_policy); these requests come after
  the explicit ones. numa_cells: InstanceNUMACell ids (null = no instance NUMA topology).
  "RT _update" = pci_placement_translator.update_provider_tree_for_pci on a ProviderTree kept for
  the whole case (our Placement; it sets extra_info['rp_uuid'] and calls
  stats.populate_pools_metadata_from_assigned_devices) + PciDevTracker.save. Before each run the
  tree gets, for each tracked device with an rp_uuid, its RP as the translator names it
  ("<node>_<PF or own address>"), if missing: VFs share their PF's RP, so give them one uuid (the
  first tracked one wins). Devices Nova does not report (physical_network) get no rp_uuid; an RP
  with no given uuid gets a random one.

Output: one line per case: {"id", "config_error": null|"Class: msg",
  "initial": {"status", "owners", "pools", "restart_pools", "placement"?} (after the startup,
             before any step),
  "steps": [
  {"op", "ok", "error": null|"Class: msg",
   "requests": [InstancePCIRequest fields], # claim/claim_only/check/attach: what Nova used
   "devices": [{"address", "request_id", "request_index"}],   # claimed/allocated by the step;
            # request_index = first position of that request_id in the step's requests (for
            # allocate: in the requests of the claim_only), null if none
   "supported": bool,                        # check only (ok = supported as well)
   "claimable": {"ok", "error", "devices"},  # check only: claim_instance on a copy
   "status": {address: status}, "owners": {address: [instance_uuid, request_id]},  # non-null
   "pools": [{"vendor_id", "product_id", "numa_node", "count", "tags", "rp_uuid"?}],
            # stats.to_device_pools_obj() in Nova's pool order; tags hold the other pool keys
   "restart_pools": [...],  # the same for the pools a restarted nova-compute would build from
            # these device rows (PciDevTracker._initial_instance_usage: a new PciDeviceStats,
            # the available devices added in address order, then the RP metadata); Nova's own
            # pool order depends on history (a pool emptied and refilled goes to the end)
   "placement": [{"name", "uuid", "inventory", "traits"}]  # report_in_placement only
  }]}
Steps after an exception go on from the state Nova was left in (no save after a failed step).
config_error: Whitelist/alias parsing, or the startup placement sync, raised.

Mocks (no database, no sysfs, no RPC): nova.db.main.api pci_device_update/destroy/get_all_by_node/
get_all_by_instance_uuid over an in-memory table (ids assigned as the DB would), and
nova.pci.utils is_physical_function / get_function_by_ifname / get_vf_product_id_by_pf_addr /
get_pci_ids_by_pci_addr answering from the case's devices (an address is a PF iff it is a type-PF
device; ifname = a VF's parent_ifname, naming its PF).
Exit status: 0 ok (1 = a selftest assertion failed), 2 bad input.
"""

import copy
import json
import sys
import types
import warnings

N = {}
NODE = 'compute1'


def load_nova():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        from nova import objects
        objects.register_all()
        from nova import context, exception
        from nova.compute import claims, pci_placement_translator, provider_tree
        from nova.db.main import api as db
        from nova.pci import manager, request, stats, utils
        from nova.virt import hardware
        import nova.conf
    import logging
    logging.disable(logging.CRITICAL)
    warnings.simplefilter('ignore')
    N.update(objects=objects, exception=exception, ppt=pci_placement_translator, claims=claims,
             ptree=provider_tree, manager=manager, request=request, stats=stats,
             hardware=hardware, CONF=nova.conf.CONF, ctx=context.get_admin_context())
    db.pci_device_update = DB.update
    db.pci_device_destroy = DB.destroy
    db.pci_device_get_all_by_node = DB.by_node
    db.pci_device_get_all_by_instance_uuid = DB.by_instance
    utils.is_physical_function = Sysfs.is_pf
    utils.get_function_by_ifname = Sysfs.by_ifname
    utils.get_vf_product_id_by_pf_addr = Sysfs.vf_product
    utils.get_pci_ids_by_pci_addr = Sysfs.ids


class DB:
    """The pci_devices table of one compute node (id 1)."""
    rows, next_id = {}, 1

    @classmethod
    def reset(cls):
        cls.rows, cls.next_id = {}, 1

    @classmethod
    def update(cls, context, node_id, address, values):
        row = cls.rows.get(address)
        if row is None:
            row = {f: None for f in N['objects'].PciDevice.fields}
            row.update(id=cls.next_id, deleted=False, extra_info='{}')
            cls.next_id += 1
            cls.rows[address] = row
        row.update(values)
        return dict(row)

    @classmethod
    def destroy(cls, context, node_id, address):
        if cls.rows.pop(address, None) is None:
            raise N['exception'].PciDeviceNotFound(node_id=node_id, address=address)

    @classmethod
    def by_node(cls, context, node_id):
        return [dict(r) for r in cls.rows.values() if r['compute_node_id'] == node_id]

    @classmethod
    def by_instance(cls, context, uuid):
        return [dict(r) for r in cls.rows.values()
                if r['status'] == 'allocated' and r['instance_uuid'] == uuid]


class Sysfs:
    """What /sys would say on the host that has the case's devices (keyed by address)."""
    devs = {}

    @classmethod
    def is_pf(cls, domain, bus, slot, function):
        d = cls.devs.get('%s:%s:%s.%s' % (domain, bus, slot, function))
        return bool(d and d['dev_type'] == 'type-PF')

    @classmethod
    def by_ifname(cls, ifname):
        pfs = [d['parent_addr'] for d in cls.devs.values()
               if d.get('parent_ifname') == ifname and d.get('parent_addr')]
        return (pfs[0], True) if pfs else (None, False)

    @classmethod
    def vf_product(cls, pf_addr):
        for d in cls.devs.values():
            if d.get('parent_addr') == pf_addr:
                return d['product_id']
        raise N['exception'].PciDeviceNotFoundById(id=pf_addr)

    @classmethod
    def ids(cls, addr):
        if addr not in cls.devs:
            raise N['exception'].PciDeviceNotFoundById(id=addr)
        return cls.devs[addr]['vendor_id'], cls.devs[addr]['product_id']


def err(e):
    return '%s: %s' % (type(e).__name__, e)


def hv_devices(case):
    """The pci_passthrough_devices JSON the libvirt driver would report."""
    out = []
    for d in case['devices']:
        dev = {'dev_id': d.get('dev_id') or 'pci_' + d['address'].replace(':', '_').replace('.', '_'),
               'address': d['address'], 'product_id': d['product_id'],
               'vendor_id': d['vendor_id'], 'numa_node': d.get('numa_node'),
               'label': d.get('label') or 'label_%s_%s' % (d['vendor_id'], d['product_id']),
               'dev_type': d['dev_type']}
        # only when set, as the libvirt driver does
        dev.update({k: d[k] for k in ('parent_addr', 'parent_ifname', 'capabilities') if d.get(k)})
        out.append(dev)
    return json.dumps(out)


class Case:
    def __init__(self, case):
        o = N['objects']
        self.case = case
        self.instances = {}      # uuid -> Instance
        self.reqs = {}           # uuid -> every request given to it, in order
        self.claimed_reqs = {}   # uuid -> requests of its last claim_only
        cells = case.get('host_cells') or []
        topo = None
        if cells:
            topo = o.NUMATopology(cells=[o.NUMACell(
                id=c['id'], socket=c.get('socket'), cpuset=set(c.get('cpuset', [])),
                pcpuset=set(), memory=c.get('memory', 0), siblings=[], pinned_cpus=set(),
                mempages=[]) for c in cells])._to_json()
        self.node = o.ComputeNode(id=1, hypervisor_hostname=NODE, numa_topology=topo)
        self.ptree = N['ptree'].ProviderTree()
        self.ptree.new_root(NODE, '00000000-0000-0000-0000-0000000000c1')
        self.rp_uuids = {d['address']: d['rp_uuid'] for d in case['devices'] if d.get('rp_uuid')}
        self.tracker = None

    def start(self):
        """nova-compute start: _setup_pci_tracker then the startup _update."""
        self.tracker = N['manager'].PciDevTracker(N['ctx'], self.node)
        self.tracker.update_devices_from_hypervisor_resources(hv_devices(self.case))
        self.rt_update()

    def rt_update(self):
        # Placement already knows the RPs of the tracked devices, under the given uuids
        for d in self.tracker.pci_devs:
            uuid = self.rp_uuids.get(d.address)
            addr = d.parent_addr if d.dev_type in N['ppt'].CHILD_TYPES else d.address
            name = '%s_%s' % (NODE, (addr or '').upper())
            if uuid and not self.ptree.exists(name):
                self.ptree.new_child(name, NODE, uuid=uuid)
        N['ppt'].update_provider_tree_for_pci(self.ptree, NODE, self.tracker, {}, [])
        self.save()

    def save(self):
        self.tracker.save(N['ctx'])

    def instance(self, uuid):
        o = N['objects']
        if uuid not in self.instances:
            self.instances[uuid] = o.Instance(
                uuid=uuid, pci_devices=o.PciDeviceList(objects=[]), numa_topology=None,
                pci_requests=o.InstancePCIRequests(instance_uuid=uuid, requests=[]))
            self.reqs[uuid] = []
        return self.instances[uuid]

    def build_requests(self, step):
        o = N['objects']
        reqs = []
        for r in step.get('requests') or []:
            kw = {k: r.get(k) for k in ('alias_name', 'request_id', 'requester_id')}
            kw.update(count=r['count'], spec=r['spec'])
            if r.get('numa_policy') is not None:
                kw['numa_policy'] = r['numa_policy']
            reqs.append(o.InstancePCIRequest(**kw))
        if step.get('flavor_alias'):
            extra = {'pci_passthrough:alias': step['flavor_alias']}
            if step.get('flavor_numa_policy'):
                extra['hw:pci_numa_affinity_policy'] = step['flavor_numa_policy']
            flavor = o.Flavor(extra_specs=extra)
            policy = N['hardware'].get_pci_numa_policy_constraint(flavor, o.ImageMeta.from_dict({}))
            reqs += N['request'].get_pci_requests_from_flavor(flavor, affinity_policy=policy).requests
        return reqs

    def numa(self, step):
        o = N['objects']
        if step.get('numa_cells') is None:
            return None
        return o.InstanceNUMATopology(cells=[o.InstanceNUMACell(
            id=c, cpuset=set(), pcpuset=set(), memory=0) for c in step['numa_cells']])

    def pci_requests(self, uuid, reqs):
        return N['objects'].InstancePCIRequests(instance_uuid=uuid, requests=reqs)

    def remember(self, uuid, reqs, out):
        inst = self.instance(uuid)
        self.reqs[uuid] += reqs
        inst.pci_requests.requests = inst.pci_requests.requests + list(reqs)
        out['requests'] = [req_json(r) for r in reqs]

    def run_step(self, step, out):
        op = step['op']
        t = self.tracker
        ctx = N['ctx']
        if op in ('claim', 'claim_only', 'check'):
            reqs = self.build_requests(step)
            numa = self.numa(step)
            if op == 'check':
                out['requests'] = [req_json(r) for r in reqs]
                out['claimable'] = self.would_claim(reqs, numa, step.get('test_pci'))
                out['supported'] = out['ok'] = bool(t.stats.support_requests(
                    reqs, None, numa.cells if numa else None))
                return
            uuid = step['instance']
            inst = self.instance(uuid)
            inst.numa_topology = numa
            self.remember(uuid, reqs, out)
            if step.get('test_pci'):
                self.test_pci(t, uuid, reqs)
            devs = t.claim_instance(ctx, self.pci_requests(uuid, reqs), numa)
            out['devices'] = dev_json(devs, reqs)
            if op == 'claim':
                t.update_pci_for_instance(ctx, inst, sign=1)
                self.rt_update()
            else:
                self.claimed_reqs[uuid] = reqs
                self.save()
        elif op == 'allocate':
            uuid = step['instance']
            devs = list(t.claims.get(uuid, []))
            out['devices'] = dev_json(devs, self.claimed_reqs.get(uuid, []))
            t.allocate_instance(self.instance(uuid))
            self.save()
        elif op == 'free':
            t.update_pci_for_instance(ctx, self.instance(step['instance']), sign=-1)
            self.rt_update()
        elif op == 'free_claims':
            t.free_instance_claims(ctx, self.instance(step['instance']))
            self.save()
        elif op == 'free_request':
            uuid = step['instance']
            inst = self.instance(uuid)
            rid = self.reqs[uuid][step['request_index']].request_id
            devs = [d for d in inst.pci_devices.objects if d.request_id == rid]
            if devs:
                t.free_device(devs[0], inst)
                self.save()
                inst.remove_pci_device_and_request(devs[0])
        elif op == 'attach':
            uuid = step['instance']
            inst = self.instance(uuid)
            reqs = self.build_requests(step)
            self.remember(uuid, reqs, out)
            try:
                devs = t.claim_instance(ctx, self.pci_requests(uuid, reqs), inst.numa_topology)
                self.save()
            except N['exception'].PciDeviceRequestFailed:
                raise N['exception'].InterfaceAttachPciClaimFailed(instance_uuid=uuid)
            out['devices'] = dev_json(devs, reqs)
            inst.pci_devices.objects.append(devs[0])
            t.allocate_instance(inst)
            self.save()
        elif op == 'restart':
            self.start()
            for uuid, inst in self.instances.items():
                inst.pci_devices = N['objects'].PciDeviceList.get_by_instance_uuid(ctx, uuid)
        elif op == 'periodic':
            t.update_devices_from_hypervisor_resources(hv_devices(self.case))
            self.rt_update()

    def test_pci(self, tracker, uuid, reqs):
        """claims.Claim._test_pci itself, on a stand-in for the Claim it reads from; raises
        as Claim._claim_test does."""
        claim = types.SimpleNamespace(_pci_requests=self.pci_requests(uuid, reqs),
                                      tracker=types.SimpleNamespace(pci_tracker=tracker))
        reason = N['claims'].Claim._test_pci(claim)
        if reason is not None:
            raise N['exception'].ComputeResourcesUnavailable(reason=reason)

    def would_claim(self, reqs, numa, test_pci):
        """claim_instance on a deep copy of the tracker: what a claim would do now."""
        t = copy.deepcopy(self.tracker)
        # NovaObject.__deepcopy__ copies fields only: the PF/VF links are rebuilt, as Nova does
        # whenever it loads devices
        N['manager'].PciDevTracker._build_device_tree(t.pci_devs)
        try:
            if test_pci:
                self.test_pci(t, CHECK_UUID, reqs)
            devs = t.claim_instance(N['ctx'], self.pci_requests(CHECK_UUID, reqs), numa)
        except Exception as e:
            return {'ok': False, 'error': err(e), 'devices': []}
        return {'ok': True, 'error': None, 'devices': dev_json(devs, reqs)}

    def snapshot(self, out):
        t = self.tracker
        out['status'] = {d.address: d.status for d in t.pci_devs}
        out['owners'] = {d.address: [d.instance_uuid, d.request_id] for d in t.pci_devs
                         if d.instance_uuid or d.request_id}
        out['pools'] = pools_json(t.stats)
        fresh = N['stats'].PciDeviceStats(t.stats.numa_topology, dev_filter=t.dev_filter)
        for d in sorted(t.pci_devs, key=lambda d: d.address):
            if d.status == 'available':
                fresh.add_device(d)
        fresh.populate_pools_metadata_from_assigned_devices()
        out['restart_pools'] = pools_json(fresh)
        if self.case.get('report_in_placement'):
            rps = []
            for uuid in sorted(self.ptree.get_provider_uuids_in_tree(NODE)):
                data = self.ptree.data(uuid)
                if data.name != NODE and data.inventory:
                    rps.append({'name': data.name, 'uuid': uuid,
                                'inventory': data.inventory, 'traits': sorted(data.traits)})
            out['placement'] = sorted(rps, key=lambda r: r['name'])


class BadInput(Exception):
    pass


def req_json(r):
    out = {k: (getattr(r, k) if r.obj_attr_is_set(k) else None) for k in
           ('count', 'alias_name', 'request_id', 'requester_id', 'numa_policy')}
    out['spec'] = [dict(s) for s in r.spec]
    return out


def pools_json(stats):
    pools = []
    for p in stats.to_device_pools_obj():
        pool = {'vendor_id': p.vendor_id, 'product_id': p.product_id,
                'numa_node': p.numa_node, 'count': p.count, 'tags': dict(p.tags)}
        if 'rp_uuid' in p.tags:
            pool['rp_uuid'] = p.tags['rp_uuid']
        pools.append(pool)
    return pools


def dev_json(devs, reqs):
    ids = [r.request_id for r in reqs]
    return [{'address': d.address, 'request_id': d.request_id,
             'request_index': ids.index(d.request_id) if d.request_id in ids else None}
            for d in devs]


def configure(case):
    CONF = N['CONF']
    rip = bool(case.get('report_in_placement'))
    pip = case.get('pci_in_placement')
    CONF.set_override('report_in_placement', rip, group='pci')
    CONF.set_override('pci_in_placement', rip if pip is None else bool(pip),
                      group='filter_scheduler')
    CONF.set_override('device_spec', [json.dumps(s) for s in case.get('device_spec') or []],
                      group='pci')
    CONF.set_override('alias', [json.dumps(a) for a in case.get('alias') or []], group='pci')
    N['request'].get_alias_from_config.cache_clear()


NEEDS = {'claim': ['instance'], 'claim_only': ['instance'], 'check': [], 'allocate': ['instance'],
         'free': ['instance'], 'free_claims': ['instance'], 'attach': ['instance', 'requests'],
         'free_request': ['instance', 'request_index'], 'restart': [], 'periodic': []}


def validate(case):
    if not isinstance(case, dict) or 'id' not in case or not isinstance(case.get('steps'), list):
        raise BadInput('a case needs "id" and "steps"')
    for d in case.get('devices') or []:
        if not all(k in d for k in ('address', 'vendor_id', 'product_id', 'dev_type')):
            raise BadInput('device %r misses address/vendor_id/product_id/dev_type' % d)
    given = {}
    for st in case['steps']:
        if not isinstance(st, dict) or st.get('op') not in NEEDS or any(
                k not in st for k in NEEDS[st['op']]):
            raise BadInput('bad step %r' % st)
        for r in st.get('requests') or []:
            if not isinstance(r.get('count'), int) or not isinstance(r.get('spec'), list):
                raise BadInput('request %r needs count and spec' % r)
        if st['op'] in ('claim', 'claim_only', 'attach'):
            given[st['instance']] = given.get(st['instance'], 0) + len(st.get('requests') or []) \
                + sum(1 for _ in filter(None, (st.get('flavor_alias') or '').split(',')))
        if st['op'] == 'free_request' and not 0 <= st['request_index'] < given.get(st['instance'], 0):
            raise BadInput('request_index out of range in %r' % st)


def run_case(case):
    validate(case)
    DB.reset()
    case.setdefault('devices', [])
    Sysfs.devs = {d['address']: d for d in case['devices']}
    configure(case)
    res = {'id': case['id'], 'config_error': None, 'steps': []}
    c = Case(case)
    try:
        N['request'].get_alias_from_config()   # validate [pci]alias as the API would
        c.start()                               # Whitelist(device_spec) + startup placement sync
    except Exception as e:
        res['config_error'] = err(e)
        return res
    res['initial'] = {}
    c.snapshot(res['initial'])
    for step in case['steps']:
        out = {'op': step['op'], 'ok': True, 'error': None, 'devices': []}
        try:
            c.run_step(step, out)
        except Exception as e:
            out['ok'], out['error'] = False, err(e)
        c.snapshot(out)
        res['steps'].append(out)
    return res


CHECK_UUID = '00000000-0000-4000-8000-0000000c4ec4'
I1 = '11111111-1111-4111-8111-111111111111'
PF, VFS = '0000:81:00.0', ['0000:81:10.%d' % i for i in range(3)]
SELF_DEVICES = [{'address': PF, 'vendor_id': '8086', 'product_id': '1572', 'dev_type': 'type-PF',
                 'parent_addr': None, 'numa_node': 0}] + [
    {'address': a, 'vendor_id': '8086', 'product_id': '154c', 'dev_type': 'type-VF',
     'parent_addr': PF, 'numa_node': 0, 'parent_ifname': 'ens1f0'} for a in VFS]
REFILL = [dict(d, address=d['address'].replace('81:', bus + ':'),
               parent_addr=d['parent_addr'] and d['parent_addr'].replace('81:', bus + ':'))
          for bus in ('81', '82') for d in SELF_DEVICES]
SELF_SPEC = [{'vendor_id': '8086', 'product_id': '1572'},
             {'vendor_id': '8086', 'product_id': '154c', 'live_migratable': 'yes'}]
SELFTEST = [
    {'id': 'two-vfs', 'device_spec': SELF_SPEC, 'devices': SELF_DEVICES, 'steps': [
        {'op': 'claim', 'instance': I1, 'requests': [{
            'count': 2, 'request_id': '00000000-0000-0000-0000-000000000001',
            'spec': [{'vendor_id': '8086', 'product_id': '154c'}]}]},
        {'op': 'free', 'instance': I1}]},
    {'id': 'pf', 'device_spec': SELF_SPEC, 'devices': SELF_DEVICES, 'steps': [
        {'op': 'claim', 'instance': I1, 'requests': [{
            'count': 1, 'request_id': '00000000-0000-0000-0000-000000000002',
            'spec': [{'vendor_id': '8086', 'product_id': '1572', 'dev_type': 'type-PF'}]}]}]},
    {'id': 'alias-lm', 'device_spec': SELF_SPEC, 'devices': SELF_DEVICES,
     'alias': [{'name': 'a1', 'vendor_id': '8086', 'product_id': '154c',
                'device_type': 'type-VF', 'live_migratable': 'yes'}],
     'steps': [{'op': 'claim', 'instance': I1, 'flavor_alias': 'a1:1'}]},
    # more VFs than there are: with the Claim's _test_pci first the claim is refused before
    # anything is taken; claim_instance alone takes the first request's and leaves its request
    # id on them
    {'id': 'test-pci', 'device_spec': SELF_SPEC, 'devices': SELF_DEVICES, 'steps': [
        {'op': 'claim', 'instance': I1, 'test_pci': True, 'requests': [
            {'count': 3, 'spec': [{'vendor_id': '8086', 'product_id': '154c'}]},
            {'count': 1, 'spec': [{'vendor_id': '8086', 'product_id': '154c'}]}]},
        {'op': 'claim', 'instance': I1, 'requests': [
            {'count': 3, 'spec': [{'vendor_id': '8086', 'product_id': '154c'}],
             'request_id': '00000000-0000-0000-0000-000000000003'},
            {'count': 1, 'spec': [{'vendor_id': '8086', 'product_id': '154c'}]}]}]},
    # a PF claimed empties its VFs' pool (remove_device drops it), its free appends the pool at
    # the end: Nova's order now depends on history; a restarted Nova's is the address order
    {'id': 'refill-order', 'device_spec': [{'vendor_id': '8086'}], 'devices': REFILL, 'steps': [
        {'op': 'claim', 'instance': I1, 'requests': [
            {'count': 1, 'spec': [{'vendor_id': '8086', 'dev_type': 'type-PF'}]}]},
        {'op': 'free', 'instance': I1}]},
    # the scheduler's count-only test passes a VF and its own PF; claim_instance does not
    {'id': 'check-vf-and-pf', 'device_spec': SELF_SPEC, 'devices': SELF_DEVICES[:2], 'steps': [
        {'op': 'check', 'requests': [
            {'count': 1, 'spec': [{'vendor_id': '8086', 'product_id': '154c'}]},
            {'count': 1, 'spec': [{'vendor_id': '8086', 'dev_type': 'type-PF'}]}]}]},
]


def selftest():
    r = [run_case(copy.deepcopy(c)) for c in SELFTEST]
    for x in r:
        print(json.dumps(x, sort_keys=True))
    s = r[0]['steps'][0]
    assert r[0]['config_error'] is None and s['ok'], s
    assert [d['request_index'] for d in s['devices']] == [0, 0], s
    assert sum(s['status'][a] == 'allocated' for a in VFS) == 2, s
    assert s['status'][PF] == 'unavailable', s
    assert [p['count'] for p in s['pools']] == [1] and s['pools'][0]['tags']['dev_type'] == 'type-VF', s
    assert set(r[0]['steps'][1]['status'].values()) == {'available'}, r[0]
    assert sorted(p['count'] for p in r[0]['steps'][1]['pools']) == [1, 3], r[0]
    s = r[1]['steps'][0]
    assert s['ok'] and s['status'][PF] == 'allocated', s
    assert all(s['status'][a] == 'unavailable' for a in VFS), s
    # the VF pool is gone; consume_requests leaves the PF's pool in place with count 0
    assert [(p['tags']['dev_type'], p['count']) for p in s['pools']] == [('type-PF', 0)], s
    s = r[2]['steps'][0]
    assert s['ok'] and s['requests'][0]['spec'][0]['live_migratable'] == 'true', s
    assert s['requests'][0]['numa_policy'] == 'legacy' and s['devices'][0]['request_index'] == 0, s
    assert s['pools'][0]['tags']['live_migratable'] == 'true', s
    s, s2 = r[3]['steps']
    assert not s['ok'] and s['error'].startswith('ComputeResourcesUnavailable'), s
    assert s['owners'] == {} and s['pools'] == r[3]['initial']['pools'], s
    assert not s2['ok'] and s2['error'].startswith('PciDeviceRequestFailed'), s2
    assert len(s2['owners']) == 3 and set(s2['status'].values()) == {'available'}, s2
    def order(pools):
        return [(p['tags']['address'][5:7], p['tags']['dev_type'][5:]) for p in pools if p['count']]
    s = r[4]['steps'][1]
    assert order(r[4]['initial']['pools']) == [('81', 'PF'), ('82', 'PF'), ('81', 'VF'),
                                               ('82', 'VF')], r[4]
    assert order(s['pools']) == [('81', 'PF'), ('82', 'PF'), ('82', 'VF'), ('81', 'VF')], s
    assert order(s['restart_pools']) == order(r[4]['initial']['pools']), s
    r3 = r[5]
    s = r3['steps'][0]
    assert s['supported'] and not s['claimable']['ok'], s
    assert s['claimable']['error'].startswith('PciDeviceRequestFailed'), s
    # a check changes nothing, in the copy's claim neither
    assert set(s['status'].values()) == {'available'} and s['owners'] == {}, s
    assert s['pools'] == r3['initial']['pools'] and len(s['pools']) == 2, r3
    print('selftest ok', file=sys.stderr)
    return 0


def main():
    load_nova()
    if sys.argv[1:] == ['--selftest']:
        try:
            return selftest()
        except AssertionError as e:
            print('selftest FAILED: %s' % e, file=sys.stderr)
            return 1
    if len(sys.argv) != 2:
        print('usage: pci_diff.py CASES.json | --selftest', file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1]) as f:
            cases = json.load(f)['cases']
        for case in cases:
            validate(case)
        for case in cases:
            print(json.dumps(run_case(case), sort_keys=True), flush=True)
    except (OSError, ValueError, KeyError, TypeError, BadInput) as e:
        print('pci_diff: bad input: %s' % err(e), file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
