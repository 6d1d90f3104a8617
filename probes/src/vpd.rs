//! PCI Vital Product Data: the card's serial number, the `SN` keyword of the read-only section of
//! a function's `vpd` attribute. Nova tracks a remote-managed (SmartNIC DPU) VF only when its
//! card has one: the networking backend finds the card by it. As libvirt does, a VF gets its
//! PF's serial number.
//!
//! In: `sys/bus/pci/devices/<pf>/vpd`, read only when asked ([`crate::ProbeOptions::pci_vpd`]):
//! at most [`VPD_MAX`] bytes, on a helper thread given [`VPD_TIMEOUT`], since a VPD read goes to
//! the device and can stall. Out: the serial number, or none (no VPD, no `SN`, a read that failed
//! or stalled, with a warning for the last two).

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;

use crate::read::Warnings;

/// The largest VPD the PCI specification allows (15-bit addresses).
pub const VPD_MAX: usize = 32 * 1024;
/// How long a VPD read may take before it is abandoned.
pub const VPD_TIMEOUT: Duration = Duration::from_secs(2);

/// The card serial number in a VPD image: the `SN` keyword of the VPD-R (read-only) resource;
/// `Ok(None)` when there is no VPD (all `0xff`, empty) or no `SN`, an error naming the offset
/// when the resources are malformed.
pub fn card_serial_number(vpd: &[u8]) -> Result<Option<String>, String> {
    let mut i = 0;
    while i < vpd.len() {
        let tag = vpd[i];
        if tag == 0xff || tag == 0x00 {
            // Unprogrammed or absent VPD reads as 0xff (or zeros).
            return Ok(None);
        }
        if tag & 0x80 == 0 {
            // Small resource: name in bits 6-3, length in bits 2-0; 0x0f is the end tag.
            if (tag >> 3) & 0x0f == 0x0f {
                return Ok(None);
            }
            i += 1 + usize::from(tag & 0x07);
            continue;
        }
        let header = vpd
            .get(i + 1..i + 3)
            .ok_or_else(|| format!("large resource at offset {i} is cut short"))?;
        let len = usize::from(u16::from_le_bytes([header[0], header[1]]));
        let data = vpd
            .get(i + 3..i + 3 + len)
            .ok_or_else(|| format!("resource at offset {i} says {len} bytes past the end"))?;
        // 0x90: VPD-R, the read-only keywords.
        if tag == 0x90 {
            if let Some(sn) = keyword(data, *b"SN") {
                let text: String = String::from_utf8_lossy(sn)
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect();
                let text = text.trim();
                return Ok((!text.is_empty()).then(|| text.to_string()));
            }
        }
        i += 3 + len;
    }
    Ok(None)
}

/// The value of keyword `name` in a VPD-R or VPD-W resource's data.
fn keyword(data: &[u8], name: [u8; 2]) -> Option<&[u8]> {
    let mut j = 0;
    while j + 3 <= data.len() {
        let len = usize::from(data[j + 2]);
        let value = data.get(j + 3..j + 3 + len)?;
        if data[j..j + 2] == name {
            return Some(value);
        }
        if &data[j..j + 2] == b"RV" {
            // The checksum keyword ends the read-only section.
            return None;
        }
        j += 3 + len;
    }
    None
}

/// Reads the serial number of the card of the function at `dir` (its `vpd` attribute).
pub fn read_serial(dir: &Path, w: &mut Warnings) -> Option<String> {
    let path = dir.join("vpd");
    // Opened here, inside the probe's root (opening does not touch the device); only the read,
    // which does, goes to the helper thread.
    let file = match crate::confine::open(&path, OFlag::O_RDONLY | OFlag::O_CLOEXEC) {
        Ok(fd) => std::fs::File::from(fd),
        Err(Errno::ENOENT) | Err(Errno::EACCES) | Err(Errno::EPERM) => return None,
        Err(e) => {
            w.push(
                &path,
                format!("cannot open: {e}: card serial number unknown"),
            );
            return None;
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("rtrack-vpd".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let r = file.take(VPD_MAX as u64).read_to_end(&mut buf).map(|_| buf);
            let _ = tx.send(r);
        });
    if spawned.is_err() {
        w.push(
            &path,
            "cannot start a thread to read it: card serial number unknown",
        );
        return None;
    }
    match rx.recv_timeout(VPD_TIMEOUT) {
        Err(_) => {
            w.push(
                &path,
                format!(
                    "read did not finish within {} s (the device stalls): card serial number unknown",
                    VPD_TIMEOUT.as_secs()
                ),
            );
            None
        }
        // No VPD (ENOENT), or a device without readable VPD (EIO): no serial number.
        Ok(Err(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) || e.raw_os_error() == Some(nix::libc::EIO) =>
        {
            None
        }
        Ok(Err(e)) => {
            w.push(
                &path,
                format!("cannot read: {e}: card serial number unknown"),
            );
            None
        }
        Ok(Ok(bytes)) => match card_serial_number(&bytes) {
            Ok(sn) => sn,
            Err(why) => {
                w.push(
                    &path,
                    format!("not PCI VPD ({why}): card serial number unknown"),
                );
                None
            }
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A VPD image as a ConnectX card carries it: the identifier string, VPD-R with PN, EC, SN
    /// and the checksum, VPD-W, the end tag.
    pub(crate) fn image(serial: &str) -> Vec<u8> {
        let mut v = vec![0x82];
        let id = b"ConnectX-6 Dx";
        v.extend((id.len() as u16).to_le_bytes());
        v.extend(id);
        let mut r = Vec::new();
        for (k, val) in [("PN", "MCX623106AN"), ("EC", "A6"), ("SN", serial)] {
            r.extend(k.as_bytes());
            r.push(val.len() as u8);
            r.extend(val.as_bytes());
        }
        r.extend(b"RV\x01\x00");
        v.push(0x90);
        v.extend((r.len() as u16).to_le_bytes());
        v.extend(&r);
        v.extend([0x91, 0x03, 0x00, b'V', b'1', 0x00]);
        v.push(0x78);
        v
    }

    #[test]
    fn the_serial_number_is_read_from_vpd_r() {
        assert_eq!(
            card_serial_number(&image("MT2034X12345"))
                .unwrap()
                .as_deref(),
            Some("MT2034X12345")
        );
        // Padding and NULs are not part of it; an empty one is none.
        assert_eq!(
            card_serial_number(&image(" MT1\0 ")).unwrap().as_deref(),
            Some("MT1")
        );
        assert_eq!(card_serial_number(&image("  ")).unwrap(), None);
    }

    #[test]
    fn absent_or_broken_vpd_is_none_or_an_error_naming_the_offset() {
        assert_eq!(card_serial_number(&[]).unwrap(), None);
        assert_eq!(card_serial_number(&[0xff; 64]).unwrap(), None);
        assert_eq!(card_serial_number(&[0x78]).unwrap(), None);
        let mut cut = image("X");
        cut.truncate(20);
        assert!(card_serial_number(&cut).unwrap_err().contains("offset"));
        assert!(card_serial_number(&[0x90, 0x10]).is_err());
        // A keyword running past its resource is no serial number.
        assert_eq!(
            card_serial_number(&[0x90, 0x04, 0x00, b'S', b'N', 0x09, b'A']).unwrap(),
            None
        );
    }

    #[test]
    fn a_missing_file_is_quietly_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Warnings::new();
        assert_eq!(read_serial(dir.path(), &mut w), None);
        assert!(w.into_vec().is_empty());
        std::fs::write(dir.path().join("vpd"), image("SN42")).unwrap();
        let mut w = Warnings::new();
        assert_eq!(read_serial(dir.path(), &mut w).as_deref(), Some("SN42"));
    }
}
