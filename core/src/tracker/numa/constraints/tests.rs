use std::collections::BTreeMap;

use super::*;
use crate::tracker::numa::PageSize;
use serde_json::{json, Value};

fn run(
    vcpus: i64,
    memory_mb: i64,
    specs: &[(&str, &str)],
    image: Value,
) -> Result<Constraints, ClaimError> {
    let extra: BTreeMap<String, String> = specs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let f = FlavorView {
        vcpus,
        memory_mb,
        extra_specs: &extra,
        path: "request_spec.flavor",
    };
    let img =
        json!({"properties": {"nova_object.name": "ImageMetaProps", "nova_object.data": image}});
    let props = ImageProps::from_image(img.as_object(), "request_spec.image")?;
    numa_constraints(&f, &props, "request_spec.image")
}

fn err(r: Result<Constraints, ClaimError>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn plain_flavors_have_no_topology_and_ask_for_vcpus() {
    let c = run(4, 2048, &[], json!({})).unwrap();
    assert_eq!(c.numa, None);
    assert_eq!(
        c.cpus,
        CpuDemand {
            shared: 4,
            dedicated: 0
        }
    );
}

#[test]
fn dedicated_guests_get_one_cell_with_every_cpu_pinned() {
    let c = run(
        4,
        2048,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("hw:emulator_threads_policy", "isolate"),
        ],
        json!({}),
    )
    .unwrap();
    let t = c.numa.unwrap();
    assert_eq!(t.cells.len(), 1);
    assert_eq!(t.cells[0].pcpuset.to_string(), "0-3");
    assert!(t.cells[0].cpuset.is_empty());
    assert_eq!(t.cells[0].memory_mb, 2048);
    assert_eq!(
        c.cpus,
        CpuDemand {
            shared: 0,
            dedicated: 5
        }
    );
}

#[test]
fn mixed_guests_split_by_mask_and_the_realtime_mask_can_stand_for_it() {
    let c = run(
        4,
        1024,
        &[
            ("hw:cpu_policy", "mixed"),
            ("hw:cpu_dedicated_mask", "^0"),
            ("hw:numa_nodes", "2"),
        ],
        json!({}),
    )
    .unwrap();
    let t = c.numa.unwrap();
    assert_eq!(
        (
            t.cells[0].cpuset.to_string(),
            t.cells[0].pcpuset.to_string()
        ),
        ("0".into(), "1".into())
    );
    assert_eq!(
        (
            t.cells[1].cpuset.to_string(),
            t.cells[1].pcpuset.to_string()
        ),
        ("".into(), "2-3".into())
    );
    assert_eq!(
        c.cpus,
        CpuDemand {
            shared: 1,
            dedicated: 3
        }
    );
    let c = run(
        4,
        1024,
        &[
            ("hw:cpu_policy", "mixed"),
            ("hw:cpu_realtime", "yes"),
            ("hw:cpu_realtime_mask", "2-3"),
        ],
        json!({}),
    )
    .unwrap();
    assert_eq!(c.numa.unwrap().cells[0].pcpuset.to_string(), "2-3");
}

#[test]
fn manual_cells_are_checked_as_nova_checks_them() {
    let ok = run(
        3,
        1024,
        &[
            ("hw:numa_nodes", "2"),
            ("hw:numa_cpus.0", "0"),
            ("hw:numa_cpus.1", "1-2"),
            ("hw:numa_mem.0", "256"),
            ("hw:numa_mem.1", "768"),
        ],
        json!({}),
    )
    .unwrap();
    let t = ok.numa.unwrap();
    assert_eq!(t.cells[1].cpuset.to_string(), "1-2");
    assert_eq!(t.cells[1].memory_mb, 768);
    assert!(err(run(
        2,
        1024,
        &[
            ("hw:numa_nodes", "2"),
            ("hw:numa_cpus.0", "0"),
            ("hw:numa_cpus.1", "0"),
            ("hw:numa_mem.0", "512"),
            ("hw:numa_mem.1", "512")
        ],
        json!({})
    ))
    .contains("CPU number 0 is assigned to two nodes"));
    assert!(err(run(
        3,
        1024,
        &[
            ("hw:numa_nodes", "2"),
            ("hw:numa_cpus.0", "0"),
            ("hw:numa_cpus.1", "1"),
            ("hw:numa_mem.0", "512"),
            ("hw:numa_mem.1", "512")
        ],
        json!({})
    ))
    .contains("CPU number {2} is not assigned to any node"));
    assert!(err(run(
        2,
        1024,
        &[("hw:numa_nodes", "2"), ("hw:numa_cpus.0", "0")],
        json!({})
    ))
    .contains("must be provided for all NUMA nodes"));
    assert!(err(run(
        2,
        1024,
        &[
            ("hw:numa_nodes", "2"),
            ("hw:numa_cpus.0", "0"),
            ("hw:numa_cpus.1", "1"),
            ("hw:numa_mem.0", "512"),
            ("hw:numa_mem.1", "256")
        ],
        json!({})
    ))
    .contains("768 MB of memory assigned, but expected 1024 MB"));
}

#[test]
fn errors_name_the_extra_spec_or_image_property() {
    let e = err(run(4, 1024, &[("hw:numa_nodes", "3")], json!({})));
    assert!(e.starts_with("request_spec.flavor.extra_specs.hw:numa_nodes: Instance CPUs and/or memory cannot be evenly distributed"), "{e}");
    assert!(err(run(2, 1024, &[("hw:numa_nodes", "0")], json!({})))
        .contains("The property 'numa_nodes' cannot be \"0\""));
    assert!(err(run(2, 1024, &[("hw:numa_nodes", "two")], json!({}))).contains("cannot be \"two\""));
    assert!(
        err(run(2, 1024, &[("hw:cpu_policy", "bogus")], json!({}))).contains("given: \"bogus\"")
    );
    assert!(err(run(
        2,
        1024,
        &[("hw:cpu_thread_policy", "isolate")],
        json!({})
    ))
    .contains("non dedicated cpu pinning policy"));
    assert!(err(run(
        2,
        1024,
        &[("hw:emulator_threads_policy", "isolate")],
        json!({})
    ))
    .contains("requires a dedicated CPU policy"));
    assert!(err(run(2, 1024, &[("hw:cpu_policy", "mixed")], json!({})))
        .contains("can not be specified at the same time"));
    assert!(err(run(
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("hw:cpu_dedicated_mask", "^0")
        ],
        json!({})
    ))
    .contains("without the 'mixed' policy"));
    assert!(err(run(
        2,
        1024,
        &[("hw:cpu_policy", "mixed"), ("hw:cpu_dedicated_mask", "0-1")],
        json!({})
    ))
    .contains("at least 1 pinned vCPU and 1 unpinned"));
    assert!(err(run(
        2,
        1024,
        &[("hw:cpu_policy", "mixed"), ("hw:cpu_dedicated_mask", "1-3")],
        json!({})
    ))
    .contains("not a subset"));
    assert!(
        err(run(2, 1024, &[("hw:mem_page_size", "huge")], json!({})))
            .contains("Invalid memory page size \"huge\"")
    );
    assert!(err(run(
        2,
        1024,
        &[("hw:cpu_policy", "dedicated"), ("resources:PCPU", "2")],
        json!({})
    ))
    .contains("in combination with the 'hw:cpu_policy'"));
    assert!(err(run(
        2,
        1024,
        &[("hw:cpu_realtime", "yes"), ("hw:cpu_realtime_mask", "^0")],
        json!({})
    ))
    .contains("Cannot set realtime policy"));
    assert!(err(run(
        2,
        1024,
        &[("hw:cpu_policy", "dedicated"), ("hw:cpu_realtime", "yes")],
        json!({})
    ))
    .contains("requires either one or more non-realtime"));
    let e = err(run(
        2,
        1024,
        &[("hw:cpu_policy", "shared")],
        json!({"hw_cpu_policy": "dedicated"}),
    ));
    assert!(e.starts_with("request_spec.image.properties.hw_cpu_policy: Image property 'hw_cpu_policy' is not permitted"), "{e}");
    assert!(err(run(
        2,
        1024,
        &[("hw:numa_nodes", "2")],
        json!({"hw_numa_nodes": 1})
    ))
    .contains("hw_numa_nodes' is not permitted"));
    assert!(err(run(
        2,
        1024,
        &[("hw:mem_page_size", "small")],
        json!({"hw_mem_page_size": "large"})
    ))
    .contains("Page size large forbidden against 'small'"));
    assert!(err(run(2, 1024, &[], json!({"hw_mem_page_size": "large"})))
        .contains("forbidden against '<empty>'"));
    assert!(err(run(2, 1024, &[], json!({"hw_cpu_policy": "bogus"})))
        .contains("Field value \"bogus\" is invalid"));
    assert!(
        err(run(2, 1024, &[("hw:locked_memory", "true")], json!({})))
            .contains("forbidden when mem_page_size is not set")
    );
}

#[test]
fn vpmem_gives_the_guest_one_numa_cell_as_in_nova() {
    let c = run(2, 1024, &[("hw:pmem", "SMALL")], json!({})).unwrap();
    let numa = c.numa.expect("a topology");
    assert_eq!(numa.cells.len(), 1);
    assert_eq!(numa.cells[0].memory_mb, 1024);
    assert_eq!(
        c.cpus,
        CpuDemand {
            shared: 2,
            dedicated: 0
        }
    );
    // Labels that are all blank ask for nothing.
    assert_eq!(
        run(2, 1024, &[("hw:pmem", " ,")], json!({})).unwrap().numa,
        None
    );
}

#[test]
fn flavor_and_image_combine_as_in_nova() {
    // A dedicated flavor wins over an image asking for shared.
    let c = run(
        2,
        1024,
        &[("hw:cpu_policy", "dedicated")],
        json!({"hw_cpu_policy": "shared"}),
    )
    .unwrap();
    assert_eq!(c.numa.unwrap().cpu_policy, Some(CpuPolicy::Dedicated));
    // The image may narrow "large" to a size.
    let c = run(
        2,
        1024,
        &[("hw:mem_page_size", "large")],
        json!({"hw_mem_page_size": "2MB"}),
    )
    .unwrap();
    assert_eq!(c.numa.unwrap().pagesize, Some(PageSize::Kb(2048)));
    // An image alone may ask for pinning and for NUMA nodes.
    let c = run(
        2,
        1024,
        &[],
        json!({"hw_cpu_policy": "dedicated", "hw_numa_nodes": 2}),
    )
    .unwrap();
    assert_eq!(c.numa.unwrap().cells.len(), 2);
    // 3MB is a page size no host has, not an error.
    let c = run(2, 1024, &[("hw:mem_page_size", "3MB")], json!({})).unwrap();
    assert_eq!(c.numa.unwrap().pagesize, Some(PageSize::Kb(3072)));
    // resources:PCPU makes a guest dedicated; resources:VCPU decides how many VCPUs it takes.
    let c = run(2, 1024, &[("resources:PCPU", "2")], json!({})).unwrap();
    assert_eq!(c.numa.unwrap().cpu_policy, Some(CpuPolicy::Dedicated));
    assert_eq!(
        c.cpus,
        CpuDemand {
            shared: 0,
            dedicated: 2
        }
    );
    let c = run(2, 1024, &[("resources:VCPU", "3")], json!({})).unwrap();
    assert_eq!(
        (c.numa, c.cpus),
        (
            None,
            CpuDemand {
                shared: 3,
                dedicated: 0
            }
        )
    );
    // A forbidden hyperthreading trait is isolate.
    let c = run(
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("trait:HW_CPU_HYPERTHREADING", "forbidden"),
        ],
        json!({}),
    )
    .unwrap();
    assert_eq!(c.numa.unwrap().thread_policy, Some(ThreadPolicy::Isolate));
}

#[test]
fn glance_dicts_are_read_like_image_meta_props_from_dict() {
    let img = json!({"properties": {"hw_numa_nodes": "2", "hw_numa_cpus.0": "0", "hw_numa_cpus.1": "1-3",
                                    "hw_numa_mem.0": "256", "hw_numa_mem.1": "768", "trait:HW_CPU_HYPERTHREADING": "required"}});
    let p = ImageProps::from_image(img.as_object(), "request_spec.image").unwrap();
    assert_eq!(p.numa_nodes, Some(2));
    assert_eq!(p.numa_cpus.as_ref().unwrap()[1].to_string(), "1-3");
    assert_eq!(p.numa_mem, Some(vec![256, 768]));
    assert_eq!(p.traits_required, vec!["HW_CPU_HYPERTHREADING".to_string()]);
    let bad = json!({"properties": {"hw_numa_cpus.0": "0-x"}});
    let e = ImageProps::from_image(bad.as_object(), "request_spec.image")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("request_spec.image.properties.hw_numa_cpus.0:"),
        "{e}"
    );
}

#[test]
fn rtrack_cpu_core_type_names_core_types_of_pinned_guests_only() {
    let specs = [
        ("hw:cpu_policy", "dedicated"),
        ("rtrack:cpu_core_type", "cpu_atom, IntelCore"),
    ];
    let t = run(2, 1024, &specs, json!({})).unwrap().numa.unwrap();
    assert_eq!(
        t.core_types.as_deref(),
        Some(&["IntelAtom".to_string(), "IntelCore".to_string()][..])
    );
    // A shared guest gets no topology from it.
    let c = run(2, 1024, &[("rtrack:cpu_core_type", "IntelCore")], json!({})).unwrap();
    assert_eq!(c.numa, None);
    let e = err(run(
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("rtrack:cpu_core_type", "big"),
        ],
        json!({}),
    ));
    assert!(
        e.contains("rtrack:cpu_core_type") && e.contains("\"big\" is not a core type"),
        "{e}"
    );
    let e = err(run(
        2,
        1024,
        &[
            ("hw:cpu_policy", "dedicated"),
            ("rtrack:cpu_core_type", " , "),
        ],
        json!({}),
    ));
    assert!(e.contains("names no core type"), "{e}");
}
