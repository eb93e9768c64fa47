//! The stored form of one compile, shared by the disk cache (`nvrtc.rs`) and the shipped stores (`shipped.rs`):
//! a magic, the log's and the CUBIN's lengths, the SHA-256 of log ‖ CUBIN, the log (ptxas's resource report),
//! the CUBIN. Decoding checks all of it and that the CUBIN is an ELF image, so that a truncated or damaged file is
//! never handed to the driver.

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"GDNCUBIN";
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const HEADER_LEN: usize = 8 + 8 + 8 + 32;

fn payload_digest(log: &[u8], cubin: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(log);
    h.update(cubin);
    h.finalize().into()
}

/// Serialises an entry: magic, log length, cubin length, sha256(log ‖ cubin), log, cubin.
pub fn encode_entry(log: &str, cubin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + log.len() + cubin.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(log.len() as u64).to_le_bytes());
    out.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload_digest(log.as_bytes(), cubin));
    out.extend_from_slice(log.as_bytes());
    out.extend_from_slice(cubin);
    out
}

/// Parses and verifies an entry; `None` for anything that does not check out.
pub fn decode_entry(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let n_log = u64::from_le_bytes(bytes[8..16].try_into().ok()?) as usize;
    let n_bin = u64::from_le_bytes(bytes[16..24].try_into().ok()?) as usize;
    let digest = &bytes[24..56];
    let body = &bytes[HEADER_LEN..];
    if body.len() != n_log.checked_add(n_bin)? {
        return None;
    }
    let (log, cubin) = body.split_at(n_log);
    if payload_digest(log, cubin) != digest || !cubin.starts_with(ELF_MAGIC) {
        return None;
    }
    Some((String::from_utf8(log.to_vec()).ok()?, cubin.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_roundtrip_and_corruption() {
        let cubin = b"\x7fELF\x02\x01rest-of-cubin".to_vec();
        let e = encode_entry("ptxas info", &cubin);
        assert_eq!(decode_entry(&e), Some(("ptxas info".into(), cubin.clone())));
        for i in [0, 9, 30, HEADER_LEN + 2, e.len() - 1] {
            let mut bad = e.clone();
            bad[i] ^= 0x40;
            assert_eq!(decode_entry(&bad), None, "flipped byte {i} accepted");
        }
        assert_eq!(decode_entry(&e[..e.len() - 1]), None);
        assert_eq!(decode_entry(&[]), None);
        let not_elf = encode_entry("", b"PTX?");
        assert_eq!(decode_entry(&not_elf), None);
    }
}
