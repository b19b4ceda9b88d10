//! A loaded module's `.eh_frame_hdr` and `.eh_frame`, copied out of its
//! image: the unwind rules (`rules`, x86_64) and, on every architecture, the
//! start of the function that holds an address. Stripping keeps these
//! sections, so a function without a name still has a stable identity: its
//! start.

use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
use std::sync::Arc;

use crate::modules::Module;

pub(crate) type Slice = gimli::EndianArcSlice<LittleEndian>;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
/// Unwind tables read where the loader mapped them.
pub(crate) type InPlace = gimli::EndianSlice<'static, LittleEndian>;

/// A module's unwind tables: copies (`Slice`, the default), or the loaded
/// image's own bytes read in place (`InPlace`, see [`tables_in_place`]).
#[derive(Clone)]
pub struct EhTables<R: gimli::Reader<Offset = usize> = Slice> {
    pub(crate) hdr: gimli::ParsedEhFrameHdr<R>,
    pub(crate) eh_frame: EhFrame<R>,
    pub(crate) bases: BaseAddresses,
    /// Bytes copied (0 when read in place).
    bytes: usize,
}

impl EhTables<Slice> {
    /// Copies the module's `.eh_frame_hdr` and `.eh_frame` out of the loaded
    /// image and parses the header's search table; None when the module has
    /// none, or they are not readable.
    pub fn of_loaded(m: &Module) -> Option<EhTables> {
        // SAFETY: `copy` is only asked for bytes inside a readable segment
        // of `m`, a module loaded in this process.
        Self::copied_with(m, |addr, len| unsafe { crate::memory::copy_loaded(addr, len) })
    }

    /// As [`EhTables::of_loaded`], for module `m` of the process `mem`
    /// reads (another process).
    pub fn of_memory(m: &Module, mem: &impl crate::memory::Memory) -> Option<EhTables> {
        Self::copied_with(m, |addr, len| {
            let mut v = vec![0u8; len];
            mem.read(addr, &mut v).then_some(v)
        })
    }

    /// As [`EhTables::of_loaded`], for module `m` of another process, from
    /// its file (when the file's build-id is the loaded image's: the same
    /// bytes).
    pub fn of_file(m: &Module) -> Option<EhTables> {
        use object::{Object, ObjectSegment, ReadRef};
        // Only the headers and the tables are read, from a regular file
        // (see `crate::files`).
        let input =
            crate::files::open_input(std::path::Path::new(&m.path), "module", crate::files::MAX_ELF).ok()?;
        let data = object::ReadCache::new(input.file);
        let file = object::File::parse(&data).ok()?;
        let id = file.build_id().ok()??;
        if m.build_id.as_deref() != Some(id) {
            return None;
        }
        // The loaded image's addresses, as offsets in the file.
        let segments: Vec<(usize, usize, usize)> = file
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (m.bias.wrapping_add(s.address() as usize), size as usize, offset as usize)
            })
            .collect();
        Self::copied_with(m, |addr, len| {
            let &(start, _, offset) = segments
                .iter()
                .find(|&&(s, n, _)| addr >= s && addr.checked_add(len).is_some_and(|e| e <= s + n))?;
            let from = offset + (addr - start);
            data.read_bytes_at(from as u64, len as u64).ok().map(<[u8]>::to_vec)
        })
    }

    /// The tables of `m`, with `copy(addr, len)` reading bytes of its image
    /// (asked only for bytes inside its readable segments).
    fn copied_with(m: &Module, copy: impl Fn(usize, usize) -> Option<Vec<u8>>) -> Option<EhTables> {
        let (hdr_addr, hdr_len) = m.eh_frame_hdr?;
        let readable = |addr: usize, len: usize| {
            m.segments
                .iter()
                .find(|s| s.read && s.start <= addr && addr.checked_add(len).is_some_and(|e| e <= s.end))
        };
        readable(hdr_addr, hdr_len)?;
        let hdr_bytes: Arc<[u8]> = copy(hdr_addr, hdr_len)?.into();
        let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr as u64);
        let hdr = EhFrameHdr::from(Slice::new(hdr_bytes, LittleEndian)).parse(&bases, 8).ok()?;
        let eh_frame_addr = match hdr.eh_frame_ptr() {
            gimli::Pointer::Direct(a) => a as usize,
            gimli::Pointer::Indirect(_) => return None,
        };
        // `.eh_frame` has no recorded size: copy to the end of its segment,
        // then keep what precedes its zero terminator.
        let seg = readable(eh_frame_addr, 4)?;
        let mut eh = copy(eh_frame_addr, seg.end - eh_frame_addr)?;
        eh.truncate(eh_frame_len(&eh));
        let text = m.segments.iter().find(|s| s.exec).map_or(0, |s| s.start);
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(hdr_addr as u64)
            .set_eh_frame(eh_frame_addr as u64)
            .set_text(text as u64);
        let bytes = eh.len() + hdr_len;
        let eh: Arc<[u8]> = eh.into();
        Some(EhTables { hdr, eh_frame: EhFrame::from(Slice::new(eh, LittleEndian)), bases, bytes })
    }
}

impl<R: gimli::Reader<Offset = usize>> EhTables<R> {
    /// The start of the function containing the absolute address `addr`,
    /// from the unwind entry that covers it; None where no entry does.
    pub fn function_start(&self, addr: usize) -> Option<usize> {
        let table = self.hdr.table()?;
        table
            .fde_for_address(&self.eh_frame, &self.bases, addr as u64, |s, b, o| s.cie_from_offset(b, o))
            .ok()
            .map(|fde| fde.initial_address() as usize)
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bytes + 64
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
/// A module's unwind tables read in place: `.eh_frame_hdr` at `hdr_addr`
/// (`hdr_len` bytes) and the `.eh_frame` it points to, up to the end of the
/// readable segment holding it (`segment_end` of its address); `text` is the
/// start of its code. Parses nothing beyond the header and allocates
/// nothing.
///
/// # Safety
/// Both ranges must stay mapped and readable for as long as the tables are
/// used (a loaded module's own tables, used while it stays loaded).
pub(crate) unsafe fn tables_in_place(
    hdr_addr: usize,
    hdr_len: usize,
    segment_end: &dyn Fn(usize) -> Option<usize>,
    text: usize,
) -> Option<EhTables<InPlace>> {
    // SAFETY: the caller's contract.
    let hdr_bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(hdr_addr as *const u8, hdr_len) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr as u64);
    let hdr = EhFrameHdr::new(hdr_bytes, LittleEndian).parse(&bases, 8).ok()?;
    let eh_frame_addr = match hdr.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a as usize,
        gimli::Pointer::Indirect(_) => return None,
    };
    let len = segment_end(eh_frame_addr)?.checked_sub(eh_frame_addr)?;
    // SAFETY: the caller's contract (`.eh_frame` lies in the segment ending
    // at `segment_end(eh_frame_addr)`).
    let eh: &'static [u8] = unsafe { std::slice::from_raw_parts(eh_frame_addr as *const u8, len) };
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr as u64)
        .set_eh_frame(eh_frame_addr as u64)
        .set_text(text as u64);
    Some(EhTables { hdr, eh_frame: EhFrame::new(eh, LittleEndian), bases, bytes: 0 })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl EhTables<InPlace> {
    /// The loaded module's own unwind tables, read in place (see
    /// [`tables_in_place`]); None when it has none or they are not in
    /// readable segments.
    ///
    /// # Safety
    /// The module must stay loaded for as long as the tables are used.
    pub(crate) unsafe fn of_loaded_in_place(m: &Module) -> Option<EhTables<InPlace>> {
        let (hdr, len) = m.eh_frame_hdr?;
        let readable = |a: usize, n: usize| {
            m.segments.iter().find(|s| s.read && s.start <= a && a.checked_add(n).is_some_and(|e| e <= s.end))
        };
        readable(hdr, len)?;
        let text = m.segments.iter().find(|s| s.exec).map_or(0, |s| s.start);
        let end = |a: usize| readable(a, 4).map(|s| s.end);
        // SAFETY: the module's own tables, in readable segments (checked),
        // used while it stays loaded (the caller's contract).
        unsafe { tables_in_place(hdr, len, &end, text) }
    }
}

/// Length of an `.eh_frame` section: its entries up to the zero terminator.
fn eh_frame_len(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    loop {
        let Some(word) = bytes.get(at..at + 4) else { return bytes.len() };
        let len = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as usize;
        let next = if len == 0 {
            return at + 4;
        } else if len == 0xffff_ffff {
            let Some(long) = bytes.get(at + 4..at + 12) else { return bytes.len() };
            let mut b = [0u8; 8];
            b.copy_from_slice(long);
            (at + 12).checked_add(u64::from_le_bytes(b) as usize)
        } else {
            (at + 4).checked_add(len)
        };
        match next {
            Some(n) if n <= bytes.len() => at = n,
            _ => return bytes.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eh_frame_length_stops_at_the_terminator() {
        let mut b = Vec::new();
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&[1; 8]);
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&[2; 4]);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&[9; 100]); // whatever follows in the segment
        assert_eq!(eh_frame_len(&b), 24);
        // A length running past the data: keep everything.
        assert_eq!(eh_frame_len(&[0xff, 0, 0, 0, 1]), 5);
        assert_eq!(eh_frame_len(&[]), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn starts_of_live_functions() {
        #[inline(never)]
        fn probe_target(x: u64) -> u64 {
            std::hint::black_box(x).wrapping_mul(3)
        }
        let f = probe_target as fn(u64) -> u64 as usize;
        let _ = probe_target(1);
        let map = crate::modules::current();
        let m = map.module(map.module_of(f).unwrap());
        let t = EhTables::of_loaded(m).expect("the test binary has unwind tables");
        assert_eq!(t.function_start(f), Some(f));
        assert_eq!(t.function_start(f + 1), Some(f));
        // Outside every entry (the module's first bytes: its ELF header).
        assert_eq!(t.function_start(m.segments[0].start), None);
        // A synthetic module has no tables.
        assert!(EhTables::of_loaded(&Module::synthetic("/x.so", 0x1000, 0x2000, false)).is_none());
        // From the file (as for another process's module): the same
        // starts; a file whose build-id is not the image's gives none.
        let from_file = EhTables::of_file(m).expect("the test binary's file has unwind tables");
        assert_eq!(from_file.function_start(f + 1), Some(f));
        let mut other = m.clone();
        other.build_id = Some(vec![1, 2, 3]);
        assert!(EhTables::of_file(&other).is_none());
    }
}
