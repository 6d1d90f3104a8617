use super::*;

/// Nova's documented example (doc/source/admin/managing-resource-providers.rst), trimmed.
const NOVA_EXAMPLE: &str = r#"
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: '$COMPUTE_NODE'
    inventories:
      additional:
        - CUSTOM_EXAMPLE_RESOURCE_CLASS:
            total: 100
            reserved: 0
            min_unit: 1
            max_unit: 10
            step_size: 1
            allocation_ratio: 1.0
    traits:
      additional:
        - 'CUSTOM_EXAMPLE_TRAIT'
  - identification:
      name: 'cmp-1_pci_0000_84_00_0'
    traits:
      additional:
        - CUSTOM_GPU_LICENSED
"#;

fn parse_text(text: &str) -> Result<ProviderConfigs, String> {
    parse(text, Path::new("/etc/nova/provider_config/a.yaml")).map_err(|e| e.to_string())
}

#[test]
fn novas_example_is_read() {
    let c = parse_text(NOVA_EXAMPLE).unwrap();
    assert_eq!(c.providers.len(), 2);
    let root = &c.providers[0];
    assert_eq!(root.target, ProviderTarget::ComputeNode);
    let inv = &root.inventories["CUSTOM_EXAMPLE_RESOURCE_CLASS"];
    assert_eq!(
        (inv.total, inv.max_unit, inv.allocation_ratio),
        (100, Some(10), 1.0)
    );
    assert!(root.traits.contains("CUSTOM_EXAMPLE_TRAIT"));
    assert_eq!(
        c.providers[1].target,
        ProviderTarget::Name("cmp-1_pci_0000_84_00_0".into())
    );
    assert!(c.warnings.is_empty());
}

#[test]
fn novas_refusals_name_the_key() {
    for (text, key) in [
        ("meta:\n  schema_version: '2.0'\n", "meta.schema_version"),
        ("meta:\n  schema_version: 1.0\n", "meta.schema_version"),
        ("providers: []\n", "meta.schema_version"),
        ("", "(file)"),
        (
            "meta: {schema_version: '1.0'}\n__source_file: x\n",
            "__source_file",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {uuid: 'not-a-uuid'}\n    traits: {additional: [CUSTOM_A]}\n",
            "providers[0].identification.uuid",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {uuid: '$COMPUTE_NODE', name: x}\n",
            "providers[0].identification",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {name: x}\n    traits: {additional: [HW_CPU_X86_AVX]}\n",
            "providers[0].traits.additional[0]",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {name: x}\n    inventories: {additional: [{VCPU: {total: 1}}]}\n",
            "providers[0].inventories.additional[0].VCPU",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {name: x}\n    inventories: {additional: [{CUSTOM_X: {reserved: 1}}]}\n",
            "providers[0].inventories.additional[0].CUSTOM_X.total",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {name: x}\n    inventories: {additional: [{CUSTOM_X: {total: many}}]}\n",
            "providers[0].inventories.additional[0].CUSTOM_X.total",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {name: x}\n    inventories: {additional: [{CUSTOM_X: {total: 1, colour: red}}]}\n",
            "providers[0].inventories.additional[0].CUSTOM_X.colour",
        ),
    ] {
        let e = parse_text(text).unwrap_err();
        assert!(
            e.contains(&format!(": {key} = ")),
            "{key}: {e}"
        );
        assert!(e.starts_with("/etc/nova/provider_config/a.yaml: "), "{e}");
    }
}

#[test]
fn minor_versions_and_empty_entries_only_warn() {
    let c =
        parse_text("meta: {schema_version: '1.7'}\nproviders:\n  - identification: {name: x}\n")
            .unwrap();
    assert!(c.providers.is_empty());
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
}

#[test]
fn broken_yaml_says_where_and_deep_nesting_does_not_crash() {
    let e = parse_text("meta: {schema_version: '1.0'\n").unwrap_err();
    assert!(e.contains("not YAML at line"), "{e}");
    let deep = "[".repeat(100_000);
    assert!(parse_text(&deep).is_err());
    // An alias is not expanded: a billion laughs is a few bytes, then a refusal.
    let laughs = "meta: {schema_version: '1.0'}\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nproviders: *c\n";
    assert!(parse_text(laughs).is_err());
}

#[test]
fn a_directory_is_read_in_name_order_and_a_provider_twice_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.yaml"), NOVA_EXAMPLE).unwrap();
    std::fs::write(dir.path().join("ignored.yml"), "not: [read").unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "meta: {schema_version: '1.0'}\nproviders:\n  - identification: {name: other}\n    traits: {additional: [CUSTOM_Z]}\n",
    )
    .unwrap();
    let c = load_dir(dir.path()).unwrap();
    assert_eq!(c.providers.len(), 3);
    assert_eq!(c.providers[0].target, ProviderTarget::Name("other".into()));
    std::fs::write(dir.path().join("c.yaml"), NOVA_EXAMPLE).unwrap();
    let e = load_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("c.yaml") && e.contains("b.yaml"), "{e}");
    assert!(load_dir(&dir.path().join("missing"))
        .unwrap()
        .providers
        .is_empty());
}

#[test]
fn a_fifo_named_yaml_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("blocking.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let e = super::load_dir(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("blocking.yaml") && e.contains("regular file"),
        "{e}"
    );
}
