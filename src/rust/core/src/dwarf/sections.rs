//! The bytes of DWARF sections, held as readers share them, and inflated
//! only as far as they are read when they are zlib-compressed.
//!
//! A compressed section cannot be read at an offset without inflating
//! everything before it, but most lookups need only a prefix: the units
//! of a C library's start-up code sit at the start of its `.debug_info`.
//! So a compressed `.debug_info`, `.debug_abbrev` or `.debug_line` keeps
//! its compressed bytes and the inflater's state, and grows its inflated
//! prefix (at least doubling) when something past it is needed.

use std::sync::Arc;

/// Bytes of one section (or of its inflated prefix), shared by the
/// readers that point into them.
#[derive(Clone, Debug)]
pub struct SectionData(Arc<Vec<u8>>);

impl SectionData {
    pub fn new(bytes: Vec<u8>) -> SectionData {
        SectionData(Arc::new(bytes))
    }

    pub fn empty() -> SectionData {
        SectionData::new(Vec::new())
    }

    /// Heap bytes of the buffer.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl std::ops::Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

// SAFETY: the bytes live in the Vec's heap buffer, owned by the Arc: moving
// a SectionData never moves them, and they are never mutated.
unsafe impl stable_deref_trait::StableDeref for SectionData {}
// SAFETY: a clone shares the same Arc, so it derefs to the same bytes.
unsafe impl stable_deref_trait::CloneStableDeref for SectionData {}

/// The smallest step by which a compressed section's prefix grows (small
/// in tests, so that their small libraries show the prefix).
const FIRST_STEP: usize = if cfg!(test) { 16 << 10 } else { 256 << 10 };

/// Largest inflated size believed (a header claiming more is damaged).
const MAX_SIZE: usize = 1 << 30;

/// One section: whole, or a compressed one inflated so far.
pub struct Section {
    data: SectionData,
    inflating: Option<Inflating>,
}

struct Inflating {
    compressed: Vec<u8>,
    z: flate2::Decompress,
    /// The size the section's header gives.
    size: usize,
}

impl Section {
    pub fn whole(bytes: Vec<u8>) -> Section {
        Section { data: SectionData::new(bytes), inflating: None }
    }

    pub fn empty() -> Section {
        Section::whole(Vec::new())
    }

    /// A zlib stream (no ELF compression header) of `size` bytes inflated;
    /// nothing is inflated yet.
    pub fn zlib(compressed: Vec<u8>, size: usize) -> Section {
        // zlib cannot inflate more than about 1032 bytes per byte: a header
        // claiming more is damaged.
        if size > MAX_SIZE || size / 1032 > compressed.len() {
            return Section::empty();
        }
        Section {
            data: SectionData::empty(),
            inflating: Some(Inflating { compressed, z: flate2::Decompress::new(true), size }),
        }
    }

    /// The bytes available now.
    pub fn data(&self) -> &SectionData {
        &self.data
    }

    /// The section's whole length (inflated).
    pub fn full_len(&self) -> usize {
        self.inflating.as_ref().map_or(self.data.len(), |i| i.size)
    }

    #[cfg(test)]
    pub fn is_complete(&self) -> bool {
        self.inflating.is_none()
    }

    /// Heap bytes held: the inflated bytes and the compressed stream.
    pub fn held_bytes(&self) -> usize {
        self.data.capacity() + self.inflating.as_ref().map_or(0, |i| i.compressed.capacity() + (48 << 10))
    }

    /// Inflates until at least `len` bytes are available (or the section
    /// ends). Returns whether the bytes changed: readers made before then
    /// still point into the old, shorter copy.
    pub fn grow_to(&mut self, len: usize) -> bool {
        let Some(inf) = self.inflating.as_mut() else { return false };
        if len <= self.data.len() {
            return false;
        }
        let target = len.max(2 * self.data.len()).max(FIRST_STEP).min(inf.size);
        let mut out = Vec::with_capacity(self.data.len().max(FIRST_STEP).min(target));
        out.extend_from_slice(&self.data);
        let mut ended = false;
        while out.len() < target {
            // Room in steps: a damaged header's claim is never reserved at
            // once (a failed allocation would abort, not unwind).
            if out.len() == out.capacity() {
                out.reserve((target - out.len()).min(out.capacity().max(FIRST_STEP)));
            }
            let before = (inf.z.total_in(), out.len());
            let at = (inf.z.total_in() as usize).min(inf.compressed.len());
            match inf.z.decompress_vec(&inf.compressed[at..], &mut out, flate2::FlushDecompress::None) {
                Ok(flate2::Status::StreamEnd) => {
                    ended = true;
                    break;
                }
                Ok(_) if (inf.z.total_in(), out.len()) != before => {}
                // No progress, or a damaged stream: keep what was inflated.
                _ => {
                    ended = true;
                    break;
                }
            }
        }
        if ended || out.len() >= inf.size {
            self.inflating = None;
        }
        out.shrink_to_fit();
        self.data = SectionData::new(out);
        true
    }

    /// Inflates the whole section.
    #[cfg(test)]
    pub fn complete(&mut self) -> bool {
        self.grow_to(usize::MAX)
    }
}

#[cfg(test)]
pub mod tests_support {
    use std::io::Write;

    /// `data` as a zlib stream.
    pub fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::deflate;
    use super::*;

    #[test]
    fn a_compressed_section_is_inflated_only_as_far_as_asked() {
        let bytes: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut s = Section::zlib(deflate(&bytes), bytes.len());
        assert_eq!(s.data().len(), 0);
        assert!(s.grow_to(10));
        assert_eq!(s.data().len(), FIRST_STEP);
        assert_eq!(&s.data()[..], &bytes[..FIRST_STEP]);
        assert!(!s.grow_to(FIRST_STEP), "enough is there");
        assert!(s.grow_to(FIRST_STEP + 1));
        assert_eq!(s.data().len(), 2 * FIRST_STEP, "at least doubles");
        assert!(!s.is_complete());
        assert!(s.complete());
        assert!(s.is_complete());
        assert_eq!(&s.data()[..], &bytes[..]);
        assert!(!s.grow_to(usize::MAX));
    }

    #[test]
    fn a_damaged_stream_keeps_what_inflated_and_stops() {
        let bytes = vec![7u8; 1_000_000];
        let mut z = deflate(&bytes);
        z.truncate(z.len() / 2);
        let mut s = Section::zlib(z, bytes.len());
        s.complete();
        assert!(s.is_complete());
        assert!(s.data().len() < bytes.len());
        assert!(s.data().iter().all(|&b| b == 7));
        let mut s = Section::zlib(b"not zlib at all".to_vec(), 100);
        s.complete();
        assert!(s.is_complete());
        assert_eq!(s.data().len(), 0);
    }
}
