//! PEM: base64 DER between `-----BEGIN {label}-----` and `-----END {label}-----`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The DER of the first `label` block of `pem`.
pub fn pem_decode(pem: &str, label: &str) -> Result<Vec<u8>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin).ok_or_else(|| format!("no `{begin}` block"))? + begin.len();
    let len = pem[start..].find(&end).ok_or_else(|| format!("no `{end}` line"))?;
    let body: String = pem[start..start + len].chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(body).map_err(|e| format!("the {label} block is not base64: {e}"))
}

/// `der` as a `label` PEM block, 64 characters a line.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let der: Vec<u8> = (0..=200).collect();
        let pem = pem_encode("PUBLIC KEY", &der);
        assert!(pem.lines().all(|l| l.len() <= 64));
        assert_eq!(pem_decode(&pem, "PUBLIC KEY"), Ok(der));
        assert!(pem_decode(&pem, "PRIVATE KEY").is_err());
        assert!(pem_decode("-----BEGIN X-----\n!!\n-----END X-----\n", "X").is_err());
    }
}
