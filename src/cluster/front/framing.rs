//! Where a relayed stream's body is in its gRPC messages, so the front moves a stream to the
//! next owner only between two messages.

/// Where a gRPC body is in its length-prefixed messages (1 flag byte, 4 length bytes, then the
/// message), so a stream is only moved between two messages.
#[derive(Default)]
pub(super) struct Framing {
    /// Bytes of the current prefix seen (0..5).
    prefix: [u8; 5],
    prefix_len: usize,
    /// Message bytes still to come.
    remaining: usize,
}

impl Framing {
    pub(super) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len());
                self.remaining -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
            self.prefix_len += n;
            data = &data[n..];
            if self.prefix_len == 5 {
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]);
                self.remaining = len as usize;
                self.prefix_len = 0;
            }
        }
    }

    pub(super) fn at_boundary(&self) -> bool {
        self.prefix_len == 0 && self.remaining == 0
    }
}
