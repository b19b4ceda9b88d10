//! Memory held as bytes at addresses: synthetic images that tests build
//! (a context chain, a stack, R objects) and, later, the segments of a core
//! file.

use super::Memory;
use std::collections::BTreeMap;

/// Segments of bytes, each at its own address; a read must lie inside one.
#[derive(Clone, Debug, Default)]
pub struct Image {
    segments: BTreeMap<usize, Vec<u8>>,
}

impl Image {
    pub fn new() -> Image {
        Image::default()
    }

    /// Adds (or replaces) the segment starting at `addr`. Segments must not
    /// overlap.
    pub fn put(&mut self, addr: usize, bytes: Vec<u8>) {
        self.segments.insert(addr, bytes);
    }

    /// Writes the word `value` at `addr`, inside an existing segment or in
    /// a new one of its own.
    pub fn put_word(&mut self, addr: usize, value: usize) {
        self.put_bytes(addr, &value.to_ne_bytes());
    }

    /// Writes `bytes` at `addr`, inside an existing segment or in a new one.
    pub fn put_bytes(&mut self, addr: usize, bytes: &[u8]) {
        if let Some((&base, seg)) = self.segments.range_mut(..=addr).next_back() {
            if addr + bytes.len() <= base + seg.len() {
                seg[addr - base..addr - base + bytes.len()].copy_from_slice(bytes);
                return;
            }
        }
        self.segments.insert(addr, bytes.to_vec());
    }
}

impl Memory for Image {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let Some(end) = addr.checked_add(buf.len()) else { return false };
        match self.segments.range(..=addr).next_back() {
            Some((&base, seg)) if end <= base + seg.len() => {
                buf.copy_from_slice(&seg[addr - base..end - base]);
                true
            }
            _ => false,
        }
    }
}

/// An image that counts the reads made of it (tests of readers that save
/// reads).
#[cfg(test)]
pub struct Counted(pub Image, pub std::cell::Cell<usize>);

#[cfg(test)]
impl Memory for Counted {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        self.1.set(self.1.get() + 1);
        self.0.read(addr, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inside_segments_only() {
        let mut m = Image::new();
        m.put(0x1000, vec![0; 32]);
        m.put_word(0x1008, 42);
        m.put_word(0x5000, 7);
        assert_eq!(m.word(0x1008), Some(42));
        assert_eq!(m.word(0x5000), Some(7));
        assert_eq!(m.word(0x1020), None, "past the segment's end");
        assert_eq!(m.word(0x101c), None, "straddles the end");
        assert_eq!(m.word(0xff8), None, "before the first segment");
        assert_eq!(m.int(0x1008), Some(42));
        assert!(!m.read(usize::MAX - 2, &mut [0; 8]));
    }
}
