//! CPU power management in the tracker: offline dedicated CPUs count and are pinned to as Nova
//! does, and the pinned CPUs that are offline are told apart by whether their guest runs.

use super::*;
use crate::tracker::numa::constraints::ImageProps;
use crate::tracker::request::numa_of;
use rtrack_fixtures::power::PowerHost;

/// Nova's PowerManagementMixedInstances host after start: dedicated 1-3,5-7 offline.
fn power_tracker(extra: &str) -> Tracker {
    let dir = scratch_dir();
    PowerHost::cpu_state().write(dir.path());
    let cfg = config(&format!(
        "cpu_dedicated_set = \"1-3,5-7\"\ncpu_shared_set = \"4,8-9\"\n{extra}"
    ));
    let opts = ProbeOptions {
        cpu_governors: cfg.resources.governor_cpus(),
        ..ProbeOptions::default()
    };
    let inv = probe_host(&HostRoot::under(dir.path()), &opts).unwrap();
    let mut t = Tracker::new(settings_for(cfg), inv.clone(), TrackerState::default());
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    t
}

fn pinned(vcpus: i64) -> InstanceRequest {
    let mut f = flavor(1, vcpus, 256, 0, &[("hw:cpu_policy", "dedicated")]);
    let numa = numa_of(&mut f, &ImageProps::default(), None, "flavor").unwrap();
    InstanceRequest {
        numa,
        ..req(f, vec![])
    }
}

fn set_state(t: &mut Tracker, n: u32, vm_state: &str) {
    t.update_instance(
        &uuid(n),
        &InstanceUpdate {
            vm_state: Some(vm_state.into()),
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn offline_dedicated_cpus_are_pcpu_and_pinned_to() {
    let mut t = power_tracker("cpu_power_management = true");
    assert_eq!(t.inventory()[&ResourceClass::Pcpu].total, 6);
    assert_eq!(t.inventory()[&ResourceClass::Vcpu].total, 3);
    assert!(claim(&mut t, 1, pinned(7)).is_err());
    let o = claim(&mut t, 1, pinned(6)).unwrap();
    let topo = o.claim.numa_topology.as_deref().unwrap();
    assert_eq!(topo.cells[0].pinned_host_cpus().to_string(), "1-3,5-7");
    // The guest runs (info() says active) on CPUs that are offline: each one is a problem.
    let pins = t.offline_pins();
    assert_eq!(pins.len(), 6);
    assert!(
        pins.iter().all(|p| p.running && !p.powered_down),
        "{pins:?}"
    );
    let cells = t.numa_details();
    let cpu1 = &cells[0].cores[0][0];
    assert_eq!(
        (cpu1.cpu, cpu1.state, cpu1.power.online),
        (1, "pinned", false)
    );
    // Stopped: Nova powered them down on purpose.
    set_state(&mut t, 1, "stopped");
    assert!(t
        .offline_pins()
        .iter()
        .all(|p| !p.running && p.powered_down));
}

#[test]
fn without_power_management_every_offline_pin_is_a_problem() {
    // The same host probed with every CPU online, then audited with some offline (taken
    // offline by hand): nothing powers pinned CPUs down on purpose.
    let mut t = tracker_with(
        SyntheticHost {
            description: "10 CPUs".into(),
            sockets: 1,
            numa_nodes: 1,
            cores_per_socket: 10,
            threads_per_core: 1,
            memory_mb_per_node: 16384,
            hugepages_2m_per_node: 0,
            pfs: vec![],
            plain: vec![],
        },
        "cpu_dedicated_set = \"1-3,5-7\"\ncpu_shared_set = \"4,8-9\"",
    );
    claim(&mut t, 1, pinned(2)).unwrap();
    set_state(&mut t, 1, "stopped");
    let dir = scratch_dir();
    PowerHost::cpu_state().write(dir.path());
    let inv = probe_host(&HostRoot::under(dir.path()), &ProbeOptions::default()).unwrap();
    t.audit(inv, time::OffsetDateTime::UNIX_EPOCH);
    let pins = t.offline_pins();
    assert_eq!(pins.len(), 2, "{pins:?}");
    assert!(pins.iter().all(|p| !p.running && !p.powered_down));
}
