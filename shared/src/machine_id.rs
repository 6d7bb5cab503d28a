//! The id Zincati gives a machine in FleetLock requests (its `node_uuid`): systemd's
//! app-specific machine id, derived from /etc/machine-id with Zincati's application id, so
//! that the machine id itself never leaves the machine. An agent computes its own machine's
//! id this way, to know which FleetLock requests are its own machine's without being told.

use ring::hmac;

/// Zincati's application id (`de35106b6ec24688b63afddaa156679b`, from its source).
const ZINCATI_APP_ID: [u8; 16] = [
    0xde, 0x35, 0x10, 0x6b, 0x6e, 0xc2, 0x46, 0x88, 0xb6, 0x3a, 0xfd, 0xda, 0xa1, 0x56, 0x67, 0x9b,
];

/// Where systemd keeps the machine id.
pub const MACHINE_ID_FILE: &str = "/etc/machine-id";

/// Zincati's id for the machine whose /etc/machine-id text is `machine_id` (32 hex digits,
/// dashes allowed): HMAC-SHA256 keyed with the machine id's 16 bytes over the application id,
/// its first 16 bytes marked as a version-4 UUID, in lower-case hex as Zincati sends it.
/// `None` when the text is no machine id.
pub fn zincati_id(machine_id: &str) -> Option<String> {
    let hex: String = machine_id.trim().chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), &ZINCATI_APP_ID);
    let mut id = [0u8; 16];
    id.copy_from_slice(&tag.as_ref()[..16]);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// This machine's Zincati id, when /etc/machine-id can be read.
pub fn this_machine_zincati_id() -> Option<String> {
    zincati_id(&std::fs::read_to_string(MACHINE_ID_FILE).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_what_systemd_derives_for_zincati() {
        // `systemd-id128 machine-id -a de35106b6ec24688b63afddaa156679b` on a machine whose
        // /etc/machine-id was 3d1219c7c4c5404aaa1f6d2a48adfda4 (systemd 252).
        let want = Some("975228d46dc94622b9bbe16671e2b58d".to_string());
        assert_eq!(zincati_id("3d1219c7c4c5404aaa1f6d2a48adfda4\n"), want);
        assert_eq!(zincati_id("3d1219c7-c4c5-404a-aa1f-6d2a48adfda4"), want);
        for bad in [
            "",
            "3d1219c7",
            "zz1219c7c4c5404aaa1f6d2a48adfda4",
            "é3d1219c7c4c5404aaa1f6d2a48adfd",
        ] {
            assert_eq!(zincati_id(bad), None, "{bad:?}");
        }
    }
}
