//! The classes a flavor asks Placement for beyond the host's four: `resources[N]:CLASS=amount`
//! for VGPU, MEM_ENCRYPTION_CONTEXT and CUSTOM_* (summed over request groups), one
//! MEM_ENCRYPTION_CONTEXT when the flavor or the image asks for memory encryption, with its model
//! ([`super::encryption_request`]), and one `CUSTOM_PMEM_NAMESPACE_<LABEL>` per label of
//! `hw:pmem`, as Nova's scheduler translates the flavor (`ResourceRequest.from_request_spec`).
//!
//! In: a flavor's extra specs and name, its image's properties when known, and the field path
//! for messages. Out: units per class and the encryption model, or a [`ClaimError`] naming the
//! extra spec or image property.
//!
//! Standard classes rtrack does not account (`SRIOV_NET_VF`, ...) and the host's own four (a
//! flavor's `resources:VCPU=0` override is for bare metal) are left to Placement.

use std::collections::BTreeMap;

use super::encryption_request::mem_encryption_model;
use super::error::ClaimError;
use super::nested::EncryptionModel;
use super::numa::ImageProps;
use crate::inventory::resources::ResourceClass;

/// Largest amount of one class a flavor may ask for.
const MAX_UNITS: i64 = 1 << 20;

/// `resources`, `resources1`, `resources_GPU`: Nova's group suffixes (digits without a
/// leading zero, or `_` and up to 64 of letters, digits, `_` and `-`).
fn is_group_prefix(prefix: &str) -> bool {
    let Some(suffix) = prefix.strip_prefix("resources") else {
        return false;
    };
    if suffix.is_empty() {
        return true;
    }
    if let Some(name) = suffix.strip_prefix('_') {
        return !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    }
    !suffix.starts_with('0') && suffix.bytes().all(|b| b.is_ascii_digit())
}

/// Units per class and the encryption model a flavor asks for.
pub type ExtraClasses = (BTreeMap<ResourceClass, i64>, Option<EncryptionModel>);

/// Units per extra class and the encryption model the extra specs ask for, with no image to
/// judge (an adopted instance, a record written before images were read).
pub fn extra_classes(
    specs: &BTreeMap<String, String>,
    field: &str,
) -> Result<ExtraClasses, ClaimError> {
    extra_classes_with(specs, None, None, field)
}

/// Nova's `hardware.get_vpmems`: the labels of `hw:pmem`, trimmed, empty ones dropped; each
/// label's class (`CUSTOM_PMEM_NAMESPACE_<LABEL>`) with the units asked of it.
fn vpmem_classes(
    specs: &BTreeMap<String, String>,
    field: &str,
) -> Result<BTreeMap<ResourceClass, i64>, ClaimError> {
    let mut out: BTreeMap<ResourceClass, i64> = BTreeMap::new();
    let Some(v) = specs.get("hw:pmem") else {
        return Ok(out);
    };
    for label in v.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let name = crate::config::pmem::pmem_class(label);
        let class = ResourceClass::from_name(&name).map_err(|_| ClaimError::Invalid {
            field: format!("{field}.extra_specs.hw:pmem"),
            message: format!(
                "label {} makes no resource class: expected labels of letters, digits and _ (as [devices] pmem_namespaces names them)",
                crate::echo::quoted(label)
            ),
        })?;
        *out.entry(class).or_default() += 1;
    }
    Ok(out)
}

/// [`extra_classes`] judged with the flavor's name and the image (`None`: no image known;
/// the checks on it are skipped).
pub fn extra_classes_with(
    specs: &BTreeMap<String, String>,
    flavor_name: Option<&str>,
    image: Option<&ImageProps>,
    field: &str,
) -> Result<ExtraClasses, ClaimError> {
    let invalid = |key: &str, message: String| ClaimError::Invalid {
        field: format!("{field}.extra_specs.{}", crate::echo::bounded(key)),
        message,
    };
    let mut out: BTreeMap<ResourceClass, i64> = BTreeMap::new();
    let mut unsuffixed: BTreeMap<ResourceClass, i64> = BTreeMap::new();
    let mut unsuffixed_mec = 0;
    for (key, value) in specs {
        let Some((prefix, name)) = key.split_once(':') else {
            continue;
        };
        if !is_group_prefix(prefix) {
            continue;
        }
        let Ok(class) = ResourceClass::from_name(name) else {
            continue;
        };
        if !class.is_extra() {
            continue;
        }
        let amount = match value.trim().parse::<i64>() {
            Ok(n) if (0..=MAX_UNITS).contains(&n) => n,
            _ => {
                return Err(invalid(
                    key,
                    format!(
                        "{} is not an amount: expected a whole number from 0 to {MAX_UNITS}",
                        crate::echo::quoted(value)
                    ),
                ))
            }
        };
        if prefix == "resources" && class == ResourceClass::MemEncryptionContext {
            unsuffixed_mec = amount;
        } else if amount > 0 {
            if prefix == "resources" {
                unsuffixed.insert(class.clone(), amount);
            }
            *out.entry(class).or_default() += amount;
        }
    }
    let model = mem_encryption_model(specs, flavor_name, image, field)?;
    if model.is_some() {
        // Nova sets the unsuffixed group's amount to 1, whatever the flavor wrote there.
        unsuffixed_mec = 1;
    }
    if unsuffixed_mec > 0 {
        *out.entry(ResourceClass::MemEncryptionContext).or_default() += unsuffixed_mec;
    }
    // hw:pmem's classes in the unsuffixed group: they replace what the flavor wrote there for
    // the same class (Nova's `add_resource` sets the group's amount).
    for (class, n) in vpmem_classes(specs, field)? {
        let written = unsuffixed.get(&class).copied().unwrap_or(0);
        let e = out.entry(class).or_default();
        *e = *e - written + n;
    }
    Ok((out, model))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn groups_are_summed_and_only_extra_classes_kept() {
        let (c, m) = extra_classes(
            &specs(&[
                ("resources:VGPU", "1"),
                ("resources1:VGPU", "2"),
                ("resources_GPU-b:CUSTOM_LICENCE", "3"),
                ("resources:VCPU", "0"),
                ("resources:SRIOV_NET_VF", "1"),
                ("resources01:VGPU", "5"),
                ("trait:CUSTOM_X", "required"),
            ]),
            "flavor",
        )
        .unwrap();
        assert_eq!(c[&ResourceClass::Vgpu], 3);
        assert_eq!(c[&ResourceClass::from_name("CUSTOM_LICENCE").unwrap()], 3);
        assert_eq!(c.len(), 2);
        assert_eq!(m, None);
    }

    #[test]
    fn mem_encryption_asks_one_context_of_its_model() {
        let (c, m) = extra_classes(
            &specs(&[
                ("hw:mem_encryption", "True"),
                ("hw:mem_encryption_model", "amd-sev-es"),
                ("resources:MEM_ENCRYPTION_CONTEXT", "4"),
            ]),
            "flavor",
        )
        .unwrap();
        assert_eq!(c[&ResourceClass::MemEncryptionContext], 1);
        assert_eq!(m, Some(EncryptionModel::AmdSevEs));
        let (_, m) = extra_classes(&specs(&[("hw:mem_encryption", "yes")]), "flavor").unwrap();
        assert_eq!(m, Some(EncryptionModel::AmdSev));
        // The class alone is scheduled but not encrypted (Nova): no model.
        let (c, m) = extra_classes(
            &specs(&[("resources:MEM_ENCRYPTION_CONTEXT", "1")]),
            "flavor",
        )
        .unwrap();
        assert_eq!((c[&ResourceClass::MemEncryptionContext], m), (1, None));
    }

    #[test]
    fn hw_pmem_asks_one_namespace_per_label() {
        let (c, _) = extra_classes(&specs(&[("hw:pmem", "4GB, SMALL,SMALL,")]), "flavor").unwrap();
        let class = |n: &str| ResourceClass::from_name(n).unwrap();
        assert_eq!(c[&class("CUSTOM_PMEM_NAMESPACE_4GB")], 1);
        assert_eq!(c[&class("CUSTOM_PMEM_NAMESPACE_SMALL")], 2);
        // Nova sets the unsuffixed group's amount; another group's is added.
        let (c, _) = extra_classes(
            &specs(&[
                ("hw:pmem", "SMALL"),
                ("resources:CUSTOM_PMEM_NAMESPACE_SMALL", "3"),
                ("resources1:CUSTOM_PMEM_NAMESPACE_SMALL", "1"),
            ]),
            "flavor",
        )
        .unwrap();
        assert_eq!(c[&class("CUSTOM_PMEM_NAMESPACE_SMALL")], 2);
        let (c, _) = extra_classes(&specs(&[("hw:pmem", " , ")]), "flavor").unwrap();
        assert!(c.is_empty());
    }

    #[test]
    fn bad_values_name_the_extra_spec() {
        for (k, v) in [
            ("resources:VGPU", "-1"),
            ("resources2:CUSTOM_X", "many"),
            ("hw:mem_encryption", "sometimes"),
        ] {
            let e = extra_classes(&specs(&[(k, v)]), "request_spec.flavor").unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("request_spec.flavor.extra_specs.{k}:")),
                "{e}"
            );
        }
        let e = extra_classes(
            &specs(&[
                ("hw:mem_encryption", "true"),
                ("hw:mem_encryption_model", "amd-sev-xyz"),
            ]),
            "f",
        )
        .unwrap_err();
        assert!(e.to_string().contains("hw:mem_encryption_model"), "{e}");
    }
}
