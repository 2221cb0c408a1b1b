//! The Formance webhooks signature (FORMANCE.md §7).
//!
//! `v1,` + base64 (standard, padded) of HMAC-SHA256 with the secret string's bytes
//! as the key — **not** base64-decoded, unlike Svix/Standard Webhooks — over
//! `"<webhook-id>.<unix-seconds>.<raw body>"`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `formance-webhook-signature` header value for one attempt.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // Computed independently: printf 'msg_1.1700000000.{"a":1}' |
        //   openssl dgst -sha256 -hmac 'c2VjcmV0' -binary | base64
        assert_eq!(
            sign("c2VjcmV0", "msg_1", 1_700_000_000, br#"{"a":1}"#),
            "v1,+GDxEcmIEsongc3BIPu1rkShUDyt+YcRoSF7qVdytTQ="
        );
    }

    #[test]
    fn secret_is_not_base64_decoded() {
        let as_is = sign("c2VjcmV0", "id", 1, b"x");
        let decoded = sign("secret", "id", 1, b"x");
        assert_ne!(as_is, decoded);
    }
}
