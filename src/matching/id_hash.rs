//! The hasher of the maps keyed by server-minted ids (the pool's ticket index, the shell's
//! ticket and match maps).

use std::hash::Hasher;

/// A fast multiplicative (Fx-style) hasher for the ticket index. SipHash's DoS resistance is not
/// needed here: ticket ids are minted by the server, not chosen by clients, and hashing was a
/// fifth of the tick when 100k matched tickets leave the index.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
