//! Whether a guest asks for memory encryption, and with which model: Nova's
//! `hardware.get_mem_encryption_constraint` over the flavor's `hw:mem_encryption` and
//! `hw:mem_encryption_model` and the image's `hw_mem_encryption` and `hw_mem_encryption_model`,
//! with the model's demands on the image (UEFI firmware, a q35 machine type, stateless firmware
//! for SEV-SNP and TDX, no video device for TDX).
//!
//! In: the flavor's extra specs and name, the image's properties (none: the caller has no image
//! to judge, e.g. an adopted instance), the field path. Out: the model, none when no encryption
//! is asked for, or a [`ClaimError::Invalid`] with Nova's reason naming the extra spec or the
//! image property.

use std::collections::BTreeMap;

use super::error::ClaimError;
use super::nested::EncryptionModel;
use super::numa::ImageProps;
use crate::echo::quoted;

/// Nova's `strutils.bool_from_string(strict=True)` words.
pub(super) fn flavor_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

/// Python's `str(bool)`.
fn py(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Python's `str(None)` for an optional string.
fn py_str(s: Option<&str>) -> String {
    s.map_or("None".to_string(), str::to_string)
}

/// The flavor's and image's request, judged as Nova judges it; see the module comment.
pub fn mem_encryption_model(
    specs: &BTreeMap<String, String>,
    flavor_name: Option<&str>,
    image: Option<&ImageProps>,
    field: &str,
) -> Result<Option<EncryptionModel>, ClaimError> {
    let spec_field = |k: &str| format!("{field}.extra_specs.{k}");
    let invalid = |f: String, message: String| ClaimError::Invalid { field: f, message };
    let flavor_enc = match specs.get("hw:mem_encryption") {
        None => None,
        Some(v) => Some(flavor_bool(v).ok_or_else(|| {
            invalid(
                spec_field("hw:mem_encryption"),
                format!("{} is not a boolean (true or false)", quoted(v)),
            )
        })?),
    };
    let image_enc = image.and_then(|i| i.mem_encryption);
    if !flavor_enc.unwrap_or(false) && !image_enc.unwrap_or(false) {
        return Ok(None);
    }
    let flavor_model = match specs.get("hw:mem_encryption_model") {
        None => None,
        Some(m) => Some(EncryptionModel::from_name(m.trim()).ok_or_else(|| {
            invalid(
                spec_field("hw:mem_encryption_model"),
                format!(
                    "{} is not a model: expected amd-sev, amd-sev-es, amd-sev-snp or intel-tdx",
                    quoted(m)
                ),
            )
        })?),
    };
    let flavor_name = py_str(flavor_name);
    let image_name = py_str(image.and_then(|i| i.name.as_deref()));
    if let (Some(f), Some(i)) = (flavor_enc, image_enc) {
        if f != i {
            return Err(invalid(
                "request_spec.image.properties.hw_mem_encryption".into(),
                format!(
                    "Flavor {flavor_name} has hw:mem_encryption extra spec explicitly set to {}, conflicting with image {image_name} which has hw_mem_encryption property explicitly set to {}",
                    specs.get("hw:mem_encryption").map_or("", String::as_str),
                    py(i)
                ),
            ));
        }
    }
    let image_model = image.and_then(|i| i.mem_encryption_model);
    if let (Some(f), Some(i)) = (flavor_model, image_model) {
        if f != i {
            return Err(invalid(
                "request_spec.image.properties.hw_mem_encryption_model".into(),
                format!(
                    "Flavor {flavor_name} has hw:mem_encryption_model extra spec explicitly set to {}, conflicting with image {image_name} which has hw_mem_encryption_model property explicitly set to {}",
                    f.as_str(),
                    i.as_str()
                ),
            ));
        }
    }
    let model = image_model
        .or(flavor_model)
        .unwrap_or(EncryptionModel::AmdSev);
    if let Some(image) = image {
        let image_id = image.id.as_deref().unwrap_or("<no-id>");
        let mut requesters = Vec::new();
        if flavor_enc == Some(true) {
            requesters.push(format!(
                "hw:mem_encryption extra spec in {flavor_name} flavor"
            ));
        }
        if image_enc == Some(true) {
            requesters.push(format!("hw_mem_encryption property of image {image_id}"));
        }
        check_image(
            model,
            image,
            &requesters.join(" and "),
            &image_name,
            image_id,
        )?;
    }
    Ok(Some(model))
}

/// `MemEncryptionConfig.check_constraints` of `model` on the image (the compute's
/// `[libvirt] hw_machine_type` is not known here: as at Nova's API, only the image's is checked).
fn check_image(
    model: EncryptionModel,
    image: &ImageProps,
    requesters: &str,
    image_name: &str,
    image_id: &str,
) -> Result<(), ClaimError> {
    let prop = |k: &str| format!("request_spec.image.properties.{k}");
    let invalid = |f: String, message: String| ClaimError::Invalid { field: f, message };
    if image.firmware_type.as_deref() != Some("uefi") {
        return Err(invalid(
            prop("hw_firmware_type"),
            format!("Memory encryption is requested by {requesters} but the image metadata doesn't have the 'hw_firmware_type' property set to 'uefi'"),
        ));
    }
    if let Some(mt) = image.machine_type.as_deref() {
        if !mt.contains("q35") {
            return Err(invalid(
                prop("hw_machine_type"),
                format!(
                    "Machine type '{mt}' is not compatible with image {image_name} ({image_id}): q35 type is required for {} to work",
                    model.as_str()
                ),
            ));
        }
    }
    let stateless = matches!(
        model,
        EncryptionModel::AmdSevSnp | EncryptionModel::IntelTdx
    );
    // Nova's `get_stateless_firmware_constraint`: the flag, with UEFI (checked above).
    if stateless && image.firmware_stateless != Some(true) {
        return Err(invalid(
            prop("hw_firmware_stateless"),
            format!("The {} memory encryption model requires stateless firmware but the image metadata doesn't have the 'hw_firmware_stateless' property set to True", model.as_str()),
        ));
    }
    if model == EncryptionModel::IntelTdx && image.video_model.as_deref() != Some("none") {
        return Err(invalid(
            prop("hw_video_model"),
            format!("The {} memory encryption model is incompatible with an attached video device. Set the 'hw_video_model' image property to 'none' to disable it", model.as_str()),
        ));
    }
    Ok(())
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

    fn image(props: serde_json::Value) -> ImageProps {
        let img = serde_json::json!({"name": "img", "id": "i-1", "properties": props});
        ImageProps::from_image(img.as_object(), "request_spec.image").unwrap()
    }

    fn tdx_image() -> serde_json::Value {
        serde_json::json!({"hw_firmware_type": "uefi", "hw_firmware_stateless": true,
                           "hw_machine_type": "q35", "hw_video_model": "none"})
    }

    fn run(f: &[(&str, &str)], i: Option<&ImageProps>) -> Result<Option<EncryptionModel>, String> {
        mem_encryption_model(&specs(f), Some("f1"), i, "request_spec.flavor")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_tdx_flavor_with_novas_tdx_image_asks_intel_tdx() {
        let tdx = [
            ("hw:mem_encryption", "true"),
            ("hw:mem_encryption_model", "intel-tdx"),
        ];
        assert_eq!(
            run(&tdx, Some(&image(tdx_image()))),
            Ok(Some(EncryptionModel::IntelTdx))
        );
        // The image alone asks too (a glance dict's strings).
        let mut props = tdx_image();
        props["hw_mem_encryption"] = "True".into();
        props["hw_mem_encryption_model"] = "intel-tdx".into();
        props["hw_firmware_stateless"] = "true".into();
        assert_eq!(
            run(&[], Some(&image(props))),
            Ok(Some(EncryptionModel::IntelTdx))
        );
        // No image known (an adopted instance): the flavor decides.
        assert_eq!(run(&tdx, None), Ok(Some(EncryptionModel::IntelTdx)));
        assert_eq!(run(&[("hw:mem_encryption", "no")], None), Ok(None));
    }

    #[test]
    fn novas_refusals_name_the_image_property() {
        let tdx = [
            ("hw:mem_encryption", "true"),
            ("hw:mem_encryption_model", "intel-tdx"),
        ];
        for (key, value, start) in [
            ("hw_firmware_type", serde_json::json!("bios"), "request_spec.image.properties.hw_firmware_type: Memory encryption is requested by hw:mem_encryption extra spec in f1 flavor but the image metadata doesn't have the 'hw_firmware_type' property set to 'uefi'"),
            ("hw_machine_type", serde_json::json!("pc-i440fx-9.0"), "request_spec.image.properties.hw_machine_type: Machine type 'pc-i440fx-9.0' is not compatible with image img (i-1): q35 type is required for intel-tdx to work"),
            ("hw_firmware_stateless", serde_json::json!(false), "request_spec.image.properties.hw_firmware_stateless: The intel-tdx memory encryption model requires stateless firmware"),
            ("hw_video_model", serde_json::json!("virtio"), "request_spec.image.properties.hw_video_model: The intel-tdx memory encryption model is incompatible with an attached video device."),
        ] {
            let mut props = tdx_image();
            props[key] = value;
            let e = run(&tdx, Some(&image(props))).unwrap_err();
            assert!(e.starts_with(start), "{key}: {e}");
        }
        // SEV needs UEFI too, not stateless firmware nor the video model.
        let sev = [("hw:mem_encryption", "true")];
        assert!(run(&sev, Some(&ImageProps::default())).is_err());
        let uefi = image(serde_json::json!({"hw_firmware_type": "uefi"}));
        assert_eq!(run(&sev, Some(&uefi)), Ok(Some(EncryptionModel::AmdSev)));
    }

    #[test]
    fn flavor_and_image_must_agree() {
        let mut props = tdx_image();
        props["hw_mem_encryption"] = false.into();
        let e = run(&[("hw:mem_encryption", "true")], Some(&image(props))).unwrap_err();
        assert!(e.ends_with("Flavor f1 has hw:mem_encryption extra spec explicitly set to true, conflicting with image img which has hw_mem_encryption property explicitly set to False"), "{e}");
        let mut props = tdx_image();
        props["hw_mem_encryption_model"] = "amd-sev".into();
        let e = run(
            &[
                ("hw:mem_encryption", "true"),
                ("hw:mem_encryption_model", "intel-tdx"),
            ],
            Some(&image(props)),
        )
        .unwrap_err();
        assert!(e.contains("hw:mem_encryption_model extra spec explicitly set to intel-tdx, conflicting with image img which has hw_mem_encryption_model property explicitly set to amd-sev"), "{e}");
    }
}
