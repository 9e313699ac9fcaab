//! Peer authentication (docs/security.md).
//!
//! Replicas of one cluster share a secret (`cluster_secret` / `cluster_secret_file` in the
//! node config; `synod local` generates one). Each peer connection carries one direction of
//! traffic (see [`crate::transport`]), so what must be authenticated is the dialer, the
//! sender of every frame on it:
//!
//! 1. the accepting replica sends a fresh random challenge of [`PEER_NONCE_BYTES`] bytes;
//! 2. the dialer answers with `PEER_MAGIC` and a [`PeerHello`] whose `mac` is
//!    HMAC-SHA256(secret, domain ‖ challenge ‖ cluster ‖ from ‖ to ‖ incarnation);
//! 3. the accepting replica checks the MAC (constant time) before it looks at anything else
//!    the dialer sends; a missing or wrong MAC closes the connection with a warning, and
//!    nothing from it reaches the protocol.
//!
//! The challenge makes a recorded hello useless on another connection, `to` makes it useless
//! at another member. This authenticates the start of a TCP connection, not each frame: an
//! attacker who can take over an established TCP stream (on-path, not merely able to reach
//! the port) is outside this model — run the peer network on a private link or VPN for that.

use sha2::Sha256;
use subtle::ConstantTimeEq;
use synod_core::wire::{PeerHello, PEER_NONCE_BYTES};

type HmacSha256 = hmac::Hmac<Sha256>;

const DOMAIN: &[u8] = b"synod peer hello v1";

/// The cluster secret. Debug never prints it.
#[derive(Clone)]
pub struct Secret(std::sync::Arc<[u8]>);

impl Secret {
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(bytes.into())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

/// A fresh challenge from the operating system's random source.
pub fn new_challenge() -> [u8; PEER_NONCE_BYTES] {
    use rand::RngCore;
    let mut nonce = [0u8; PEER_NONCE_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    nonce
}

/// `bytes` random bytes from the operating system, as hex: a fresh cluster secret or admin
/// token (`synod local` makes one of each).
pub fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut raw = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// The MAC of `hello` (its `mac` field excluded) answering `challenge`.
pub fn mac(secret: &Secret, challenge: &[u8], hello: &PeerHello) -> Vec<u8> {
    use hmac::Mac;
    let mut m = HmacSha256::new_from_slice(&secret.0).expect("HMAC takes keys of any length");
    m.update(DOMAIN);
    m.update(&(challenge.len() as u32).to_be_bytes());
    m.update(challenge);
    m.update(&(hello.cluster.len() as u32).to_be_bytes());
    m.update(hello.cluster.as_bytes());
    m.update(&hello.from.to_be_bytes());
    m.update(&hello.to.to_be_bytes());
    m.update(&hello.incarnation.to_be_bytes());
    m.finalize().into_bytes().to_vec()
}

/// Why a peer's hello was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("peer {from} sent no authentication (this replica requires the cluster secret; is cluster_secret set on every member?)")]
    Missing { from: u32 },
    #[error("peer {from} failed authentication (wrong cluster secret, or a forged hello)")]
    Wrong { from: u32 },
    #[error("hello from peer {from} is addressed to replica {to}, this is replica {me}")]
    WrongReplica { from: u32, to: u32, me: u32 },
}

/// Check a hello received by replica `me` after sending `challenge`. Without a secret every
/// hello passes (authentication off); with one, the MAC must match.
pub fn verify(secret: Option<&Secret>, me: u32, challenge: &[u8], hello: &PeerHello) -> Result<(), AuthError> {
    let Some(secret) = secret else { return Ok(()) };
    if hello.mac.is_empty() {
        return Err(AuthError::Missing { from: hello.from });
    }
    let expected = mac(secret, challenge, hello);
    if !bool::from(expected.as_slice().ct_eq(hello.mac.as_slice())) {
        return Err(AuthError::Wrong { from: hello.from });
    }
    if hello.to != me {
        return Err(AuthError::WrongReplica { from: hello.from, to: hello.to, me });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(from: u32, to: u32) -> PeerHello {
        PeerHello { cluster: "c".into(), from, incarnation: 7, to, mac: Vec::new() }
    }

    #[test]
    fn a_correct_mac_passes_and_every_forgery_fails() {
        let secret = Secret::new(b"s3cret");
        let challenge = new_challenge();
        let mut h = hello(2, 1);
        assert_eq!(verify(Some(&secret), 1, &challenge, &h), Err(AuthError::Missing { from: 2 }));
        assert_eq!(verify(None, 1, &challenge, &h), Ok(()), "no secret: authentication off");
        h.mac = mac(&secret, &challenge, &h);
        assert_eq!(verify(Some(&secret), 1, &challenge, &h), Ok(()));
        // Another secret, another challenge (a replayed hello), another claimed sender,
        // another incarnation or a flipped bit: all refused.
        assert_eq!(verify(Some(&Secret::new(b"other")), 1, &challenge, &h), Err(AuthError::Wrong { from: 2 }));
        assert_eq!(verify(Some(&secret), 1, &new_challenge(), &h), Err(AuthError::Wrong { from: 2 }));
        let mut forged = h.clone();
        forged.from = 3;
        assert_eq!(verify(Some(&secret), 1, &challenge, &forged), Err(AuthError::Wrong { from: 3 }));
        let mut forged = h.clone();
        forged.incarnation += 1;
        assert!(verify(Some(&secret), 1, &challenge, &forged).is_err());
        let mut forged = h.clone();
        forged.mac[0] ^= 1;
        assert!(verify(Some(&secret), 1, &challenge, &forged).is_err());
        // The right MAC for replica 1 is refused by replica 3.
        assert_eq!(verify(Some(&secret), 3, &challenge, &h), Err(AuthError::WrongReplica { from: 2, to: 1, me: 3 }));
        assert!(!format!("{secret:?}").contains("s3cret"));
    }
}
