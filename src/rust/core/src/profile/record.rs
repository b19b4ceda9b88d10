//! The sample record: the one format between the code that takes samples
//! (the signal handler, the sampler of other threads, the allocation
//! sampler, the recorder of another process) and the code that reads them
//! (the collector, the profile's builder). Every tag, flag and bit of it is
//! here, with its encoding and decoding; nothing else masks a record's
//! words.
//!
//! A record is `[header, origin, link, context, entry...]`, entries
//! innermost first:
//! * [`Header`]: flags, weight (timer expirations it stands for) and the
//!   nanoseconds the handler took, `flags | weight << 8 | ns << 32`;
//! * [`Origin`]: which snapshot of loaded modules the native frames were
//!   walked with (and are named with), the sampled thread's kernel id (0
//!   for R's main thread), and whether modules may have changed since the
//!   snapshot (set by the collector);
//! * link: the sample's number among R's main thread's samples (for
//!   another thread's sample: the number of the main thread's sample to
//!   show it under, see `collect`);
//! * context: the address of R's innermost context record then;
//! * [`Entry`]s: native frames, R frames and loops, source positions, and
//!   last in an allocation's sample its number and bytes.
//!
//! A distinct stack (see `collect`) is an origin word followed by entries;
//! another thread's stack joined to R's main thread's holds a second origin
//! word, the main thread's, after its `[thread N]` entry.
//!
//! The encoders are `const fn`s and inline: the signal handler uses them.

/// Words before a record's entries: header, origin, link, context.
pub const PREFIX: usize = 4;

/// The two top bits of a word: its kind.
const TAG: u64 = 3 << 62;
const TAG_ORIGIN: u64 = 0;
const TAG_NATIVE: u64 = 1 << 62;
const TAG_R: u64 = 2 << 62;
/// Source positions and allocation facts share the last tag, told apart by
/// the next bit.
const TAG_MORE: u64 = 3 << 62;
const ALLOC_BIT: u64 = 1 << 61;

/// An origin word's bits: the snapshot's number (low 31), whether the
/// sample is another process's (bit 31), the thread's or process's kernel
/// id (29 bits from 32), and the collector's mark.
const UNCERTAIN: u64 = 1 << 61;
const TID_SHIFT: u32 = 32;
const TID_MASK: u64 = (1 << 29) - 1;
const INDEX_MASK: u64 = (1 << 31) - 1;
const PROCESS_BIT: u64 = 1 << 31;

/// A native entry's bits: the instruction pointer (low 56) and whether it
/// is the interrupted instruction rather than a return address.
const EXACT_IP: u64 = 1 << 60;
const IP_MASK: u64 = (1 << 56) - 1;

/// An R entry's bits: its label id (low 32) and, for a loop, who the loop
/// belongs to (29 bits from 32, see [`Owner`]).
const LABEL_MASK: u64 = 0xffff_ffff;
const OWNER_SHIFT: u32 = 32;
const OWNER_MASK: u64 = (1 << 29) - 1;

/// A position's bits: the file's label id (29 bits from 32) and the line.
const FILE_SHIFT: u32 = 32;
const FILE_MASK: u64 = (1 << 29) - 1;
const LINE_MASK: u64 = 0xffff_ffff;

/// An allocation entry's payload bits.
const PAYLOAD_MASK: u64 = (1 << 61) - 1;

/// The header's fields.
const FLAGS_MASK: u64 = 0xff;
const WEIGHT_SHIFT: u32 = 8;
const NS_SHIFT: u32 = 32;

/// The header's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    pub const NONE: Flags = Flags(0);
    /// The native stack could not be walked to its end.
    pub const TRUNCATED_NATIVE: Flags = Flags(1);
    /// R's context chain could not be read whole.
    pub const TRUNCATED_R: Flags = Flags(2);
    /// A sample of R's main thread taken only for other threads' samples
    /// to be shown under: it counts no time (its weight is 0).
    pub const REFERENCE: Flags = Flags(4);
    /// A sample of a thread other than R's main thread.
    pub const WORKER: Flags = Flags(8);
    /// A sample of an allocation (a memory profile): its entries end with
    /// the sample's number and the bytes allocated.
    pub const ALLOC: Flags = Flags(16);
    /// A sample of another process (its origin names it, see
    /// [`Origin::child`]): a forked child's, or with `WORKER` a worker
    /// process's read from outside, whose link and context name R's main
    /// thread's sample to show it under (see `capture::traced`).
    pub const PROCESS: Flags = Flags(32);
    /// Not a sample: the text of a label a child process made (see
    /// [`label_record`]).
    pub const LABEL: Flags = Flags(64);

    #[inline]
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    #[inline]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    #[inline]
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether either part of the stack was cut short.
    #[inline]
    pub const fn truncated(self) -> bool {
        self.intersects(Flags::TRUNCATED_NATIVE.union(Flags::TRUNCATED_R))
    }

    /// Whether other threads' samples may be shown under this sample of R's
    /// main thread: not if its native walk stopped early (a frame no rule
    /// unwinds, such as the dynamic linker's lazy binding), which leaves out
    /// the frames they hang under. The handler does not offer such a sample
    /// for reuse, nor does `collect` join to it.
    #[inline]
    pub const fn anchors_threads(self) -> bool {
        !self.contains(Flags::TRUNCATED_NATIVE)
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    #[inline]
    fn bitor(self, other: Flags) -> Flags {
        self.union(other)
    }
}

impl std::ops::BitOrAssign for Flags {
    #[inline]
    fn bitor_assign(&mut self, other: Flags) {
        *self = self.union(other);
    }
}

/// A record's first word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub flags: Flags,
    /// Timer expirations (or allocation samples) the record stands for, at
    /// most [`Header::MAX_WEIGHT`].
    pub weight: u64,
    /// Nanoseconds the sample took, at most `u32::MAX`.
    pub handler_ns: u64,
}

impl Header {
    pub const MAX_WEIGHT: u64 = 0xff_ffff;

    /// The word; a weight or time too large is held at its largest.
    #[inline]
    pub const fn encode(self) -> u64 {
        let weight = if self.weight > Self::MAX_WEIGHT { Self::MAX_WEIGHT } else { self.weight };
        let ns = if self.handler_ns > u32::MAX as u64 { u32::MAX as u64 } else { self.handler_ns };
        self.flags.0 as u64 | weight << WEIGHT_SHIFT | ns << NS_SHIFT
    }

    #[inline]
    pub const fn decode(word: u64) -> Header {
        Header {
            flags: Flags((word & FLAGS_MASK) as u8),
            weight: (word >> WEIGHT_SHIFT) & Self::MAX_WEIGHT,
            handler_ns: word >> NS_SHIFT,
        }
    }
}

/// A record's second word (and a stack's first): where its native frames'
/// addresses are named from, and which thread it is of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The number of the session's snapshot of loaded modules.
    pub snapshot: u32,
    /// The sampled thread's kernel id; 0 for R's main thread. For another
    /// process's sample, that process's id.
    pub tid: u32,
    /// A sample of another process (a forked child), whose id is `tid`.
    pub process: bool,
    /// Modules may have been loaded or unloaded between the snapshot and
    /// the sample, so the addresses may be another module's than the
    /// snapshot says (set by the collector).
    pub uncertain: bool,
}

impl Origin {
    /// R's main thread's sample with snapshot `snapshot`.
    #[inline]
    pub const fn main(snapshot: u32) -> Origin {
        Origin { snapshot, tid: 0, uncertain: false, process: false }
    }

    /// A sample of thread `tid` (0: R's main thread) with snapshot
    /// `snapshot`.
    #[inline]
    pub const fn thread(snapshot: u32, tid: u32) -> Origin {
        Origin { snapshot, tid, uncertain: false, process: false }
    }

    /// A sample of process `pid` (its main thread) with snapshot
    /// `snapshot`.
    #[inline]
    pub const fn child(snapshot: u32, pid: u32) -> Origin {
        Origin { snapshot, tid: pid, uncertain: false, process: true }
    }

    /// The word (a kernel id wider than 29 bits is cut to them).
    #[inline]
    pub const fn encode(self) -> u64 {
        TAG_ORIGIN
            | (self.tid as u64 & TID_MASK) << TID_SHIFT
            | if self.uncertain { UNCERTAIN } else { 0 }
            | if self.process { PROCESS_BIT } else { 0 }
            | (self.snapshot as u64 & INDEX_MASK)
    }

    /// None if the word is not an origin word.
    #[inline]
    pub const fn decode(word: u64) -> Option<Origin> {
        if word & TAG != TAG_ORIGIN {
            return None;
        }
        Some(Origin {
            snapshot: (word & INDEX_MASK) as u32,
            tid: ((word >> TID_SHIFT) & TID_MASK) as u32,
            uncertain: word & UNCERTAIN != 0,
            process: word & PROCESS_BIT != 0,
        })
    }

    /// The same origin on R's main thread: what names the frames (snapshot
    /// and certainty) without the thread or process.
    #[inline]
    pub const fn without_thread(self) -> Origin {
        Origin { tid: 0, process: false, ..self }
    }

    /// Marked uncertain (`uncertain`) or as it was.
    #[inline]
    pub const fn marked(self, uncertain: bool) -> Origin {
        Origin { uncertain: self.uncertain || uncertain, ..self }
    }
}

/// Who a loop belongs to (on a loop's R entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The next R frame further out: a loop of that function's body (and
    /// every R entry that is not a loop's).
    #[default]
    Caller,
    /// No function: code run by `eval()`, a loop at the top level.
    TopLevel,
    /// The R frame labelled with this id: a loop in a promise's code,
    /// which belongs to the function that made the promise, not to the
    /// function forcing it.
    Frame(u32),
}

impl Owner {
    #[inline]
    const fn bits(self) -> u64 {
        (match self {
            Owner::Caller => 0,
            Owner::TopLevel => 1,
            Owner::Frame(id) => 2 + id as u64,
        }) & OWNER_MASK
    }

    #[inline]
    const fn from_bits(bits: u64) -> Owner {
        match bits {
            0 => Owner::Caller,
            1 => Owner::TopLevel,
            n => Owner::Frame((n - 2) as u32),
        }
    }
}

/// One entry of a record or a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A native frame: its instruction pointer, `exact` when it is the
    /// interrupted instruction (the innermost frame of a signal's sample)
    /// rather than a return address.
    Native { ip: usize, exact: bool },
    /// An R frame, a loop, or a marker (`[thread N]`, `<GC>`): a label id
    /// (see `labels`), and for a loop who it belongs to.
    R { label: u32, owner: Owner },
    /// Under line profiling, after an R entry whose position is known: the
    /// file (a label id) and the line.
    Pos { file: u32, line: u32 },
    /// The last two entries of an allocation's sample: its number (for
    /// following its block to its free), then its bytes.
    Alloc(u64),
    /// A second origin in a stack: where R's main thread's part of a
    /// joined stack begins.
    Origin(Origin),
}

impl Entry {
    /// A native frame's entry.
    #[inline]
    pub const fn native(ip: usize, exact: bool) -> u64 {
        TAG_NATIVE | if exact { EXACT_IP } else { 0 } | (ip as u64 & IP_MASK)
    }

    /// An R frame's entry with label `label` (not a loop of another owner).
    #[inline]
    pub const fn r(label: u32) -> u64 {
        TAG_R | label as u64
    }

    /// A loop's entry with label `label`, belonging to `owner`.
    #[inline]
    pub const fn r_owned(label: u32, owner: Owner) -> u64 {
        TAG_R | owner.bits() << OWNER_SHIFT | label as u64
    }

    /// A source position's entry.
    #[inline]
    pub const fn pos(file: u32, line: u32) -> u64 {
        TAG_MORE | (file as u64 & FILE_MASK) << FILE_SHIFT | line as u64
    }

    /// An allocation fact's entry (payloads above 61 bits are cut).
    #[inline]
    pub const fn alloc(payload: u64) -> u64 {
        TAG_MORE | ALLOC_BIT | (payload & PAYLOAD_MASK)
    }

    /// The word.
    #[cfg(test)]
    #[inline]
    pub const fn encode(self) -> u64 {
        match self {
            Entry::Native { ip, exact } => Entry::native(ip, exact),
            Entry::R { label, owner } => Entry::r_owned(label, owner),
            Entry::Pos { file, line } => Entry::pos(file, line),
            Entry::Alloc(payload) => Entry::alloc(payload),
            Entry::Origin(o) => o.encode(),
        }
    }

    #[inline]
    pub const fn decode(word: u64) -> Entry {
        match word & TAG {
            TAG_NATIVE => Entry::Native { ip: (word & IP_MASK) as usize, exact: word & EXACT_IP != 0 },
            TAG_R => Entry::R {
                label: (word & LABEL_MASK) as u32,
                owner: Owner::from_bits((word >> OWNER_SHIFT) & OWNER_MASK),
            },
            TAG_MORE if word & ALLOC_BIT != 0 => Entry::Alloc(word & PAYLOAD_MASK),
            TAG_MORE => Entry::Pos {
                file: ((word >> FILE_SHIFT) & FILE_MASK) as u32,
                line: (word & LINE_MASK) as u32,
            },
            _ => match Origin::decode(word) {
                Some(o) => Entry::Origin(o),
                None => Entry::Origin(Origin::main(0)), // unreachable: the tags are exhausted
            },
        }
    }

    /// Whether a word is a native frame's entry.
    #[inline]
    pub const fn is_native(word: u64) -> bool {
        word & TAG == TAG_NATIVE
    }

    /// Whether a word is an R entry (frame, loop or marker).
    #[inline]
    pub const fn is_r(word: u64) -> bool {
        word & TAG == TAG_R
    }

    /// A native entry's instruction pointer (None: not a native entry).
    #[inline]
    pub const fn ip_of(word: u64) -> Option<usize> {
        if Entry::is_native(word) {
            Some((word & IP_MASK) as usize)
        } else {
            None
        }
    }

    /// The address to name a native entry by: the interrupted instruction
    /// itself, or inside the call a return address follows.
    #[inline]
    pub const fn probe(ip: usize, exact: bool) -> usize {
        if exact {
            ip
        } else {
            ip.wrapping_sub(1)
        }
    }

    /// An R entry's label id (None: not an R entry).
    #[inline]
    pub const fn label_of(word: u64) -> Option<u32> {
        if Entry::is_r(word) {
            Some((word & LABEL_MASK) as u32)
        } else {
            None
        }
    }
}

/// The first four words of a record, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub header: Header,
    pub origin: Origin,
    pub link: u64,
    pub context: u64,
}

impl Prefix {
    /// The words, in a record's order.
    #[inline]
    pub const fn encode(self) -> [u64; PREFIX] {
        [self.header.encode(), self.origin.encode(), self.link, self.context]
    }
}

/// Writes `prefix` over a record's first words (a record shorter than its
/// prefix gets what fits).
#[inline]
pub fn write_prefix(record: &mut [u64], prefix: Prefix) {
    let words = prefix.encode();
    let n = PREFIX.min(record.len());
    record[..n].copy_from_slice(&words[..n]);
}

/// A record's prefix and its entries; None if it is too short or its
/// second word is no origin.
pub fn split(record: &[u64]) -> Option<(Prefix, &[u64])> {
    let (prefix, entries) = (record.get(..PREFIX)?, record.get(PREFIX..)?);
    let origin = Origin::decode(prefix[1])?;
    Some((Prefix { header: Header::decode(prefix[0]), origin, link: prefix[2], context: prefix[3] }, entries))
}

/// The origin of a record (None: not a record's).
pub fn origin_of(record: &[u64]) -> Option<Origin> {
    record.get(1).and_then(|&w| Origin::decode(w))
}

/// The two words an allocation's sample ends with.
#[inline]
pub const fn alloc_tail(number: u64, bytes: u64) -> [u64; 2] {
    [Entry::alloc(number), Entry::alloc(bytes)]
}

/// An allocation's sample's entries without their tail, and the tail's
/// (number, bytes); None if they do not end with one.
pub fn split_alloc_tail(entries: &[u64]) -> Option<(&[u64], (u64, u64))> {
    let n = entries.len();
    let (Entry::Alloc(number), Entry::Alloc(bytes)) =
        (Entry::decode(*entries.get(n.checked_sub(2)?)?), Entry::decode(*entries.get(n - 1)?))
    else {
        return None;
    };
    Some((&entries[..n - 2], (number, bytes)))
}

/// A label a child process made, as a record for its parent: the header
/// (flag [`Flags::LABEL`]), the label's id in the child, its length in
/// bytes, then the bytes, 8 to a word (little-endian, the last word padded
/// with zeros). Written into `buf`; its length, or None if it does not fit.
pub fn label_record(buf: &mut [u64], id: u32, text: &[u8]) -> Option<usize> {
    let words = text.len().div_ceil(8);
    let len = 3 + words;
    let out = buf.get_mut(..len)?;
    out[0] = Header { flags: Flags::LABEL, weight: 0, handler_ns: 0 }.encode();
    out[1] = id as u64;
    out[2] = text.len() as u64;
    for (k, chunk) in text.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        out[3 + k] = u64::from_le_bytes(b);
    }
    Some(len)
}

/// The (id, text) of a [`label_record`]; None if it is not one (or is
/// damaged).
pub fn split_label_record(record: &[u64]) -> Option<(u32, Vec<u8>)> {
    let header = Header::decode(*record.first()?);
    if !header.flags.contains(Flags::LABEL) {
        return None;
    }
    let id = u32::try_from(*record.get(1)?).ok()?;
    let n = usize::try_from(*record.get(2)?).ok()?;
    let words = record.get(3..)?;
    if n > words.len() * 8 || words.len() != n.div_ceil(8) {
        return None;
    }
    let mut text: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    text.truncate(n);
    Some((id, text))
}

/// A record being written into a buffer of fixed size: what does not fit
/// is left out (the stack is cut, never the buffer overrun). Allocates
/// nothing: the signal handler writes with it.
pub struct Writer<'a> {
    buf: &'a mut [u64],
    len: usize,
}

impl<'a> Writer<'a> {
    /// Starts a record in `buf` with room for its prefix (written last, by
    /// [`finish`](Writer::finish)).
    #[inline]
    pub fn new(buf: &'a mut [u64]) -> Writer<'a> {
        let len = PREFIX.min(buf.len());
        Writer { buf, len }
    }

    /// Continues a record of `len` words already in `buf`.
    #[cfg(test)]
    #[inline]
    pub fn resume(buf: &'a mut [u64], len: usize) -> Writer<'a> {
        let len = len.clamp(PREFIX.min(buf.len()), buf.len());
        Writer { buf, len }
    }

    /// Appends an encoded entry (see [`Entry`]'s encoders); false if it
    /// did not fit.
    #[inline]
    pub fn push(&mut self, word: u64) -> bool {
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                *slot = word;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Words written so far, prefix included.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries written so far.
    #[cfg(test)]
    #[inline]
    pub fn entries(&self) -> usize {
        self.len.saturating_sub(PREFIX)
    }

    /// Writes the prefix; the whole record.
    #[inline]
    pub fn finish(self, prefix: Prefix) -> &'a mut [u64] {
        let record = &mut self.buf[..self.len];
        write_prefix(record, prefix);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: Entry) {
        assert_eq!(Entry::decode(e.encode()), e, "{e:?}");
    }

    #[test]
    fn every_entry_kind_round_trips() {
        for exact in [false, true] {
            round_trip(Entry::Native { ip: 0, exact });
            round_trip(Entry::Native { ip: 0x7f12_3456_789a, exact });
            round_trip(Entry::Native { ip: IP_MASK as usize, exact });
        }
        for owner in [Owner::Caller, Owner::TopLevel, Owner::Frame(0), Owner::Frame(12345)] {
            round_trip(Entry::R { label: 0, owner });
            round_trip(Entry::R { label: u32::MAX, owner });
        }
        round_trip(Entry::Pos { file: 0, line: 0 });
        round_trip(Entry::Pos { file: FILE_MASK as u32, line: u32::MAX });
        round_trip(Entry::Alloc(0));
        round_trip(Entry::Alloc(PAYLOAD_MASK));
        round_trip(Entry::Origin(Origin::main(7)));
        round_trip(Entry::Origin(Origin {
            snapshot: INDEX_MASK as u32,
            tid: TID_MASK as u32,
            uncertain: true,
            process: true,
        }));
        round_trip(Entry::Origin(Origin::child(3, 4242)));
    }

    #[test]
    fn kinds_are_told_apart() {
        let native = Entry::native(0x1234, true);
        let r = Entry::r(9);
        let pos = Entry::pos(3, 4);
        let alloc = Entry::alloc(5);
        let origin = Origin::main(2).encode();
        assert!(Entry::is_native(native) && !Entry::is_native(r) && !Entry::is_native(pos));
        assert!(Entry::is_r(r) && !Entry::is_r(native) && !Entry::is_r(alloc) && !Entry::is_r(origin));
        assert_eq!(Entry::ip_of(native), Some(0x1234));
        assert_eq!(Entry::ip_of(r), None);
        assert_eq!(Entry::label_of(r), Some(9));
        assert_eq!(Entry::label_of(Entry::r_owned(9, Owner::Frame(4))), Some(9));
        assert_eq!(Entry::label_of(pos), None);
        assert_eq!(Origin::decode(native), None);
        assert_eq!(Origin::decode(origin), Some(Origin::main(2)));
        assert!(matches!(Entry::decode(pos), Entry::Pos { file: 3, line: 4 }));
        assert!(matches!(Entry::decode(alloc), Entry::Alloc(5)));
    }

    #[test]
    fn oversized_fields_are_cut_not_spilled() {
        // A payload, an ip or a thread id too wide stays inside its field.
        assert!(matches!(Entry::decode(Entry::alloc(u64::MAX)), Entry::Alloc(p) if p == PAYLOAD_MASK));
        let n = Entry::native(usize::MAX, false);
        assert!(Entry::is_native(n));
        assert_eq!(Entry::decode(n), Entry::Native { ip: IP_MASK as usize, exact: false });
        let o = Origin { snapshot: 1, tid: u32::MAX, uncertain: false, process: false };
        assert_eq!(Origin::decode(o.encode()).unwrap().tid, TID_MASK as u32);
        assert!(!Origin::decode(o.encode()).unwrap().uncertain);
    }

    #[test]
    fn headers_round_trip_and_saturate() {
        let flags = Flags::WORKER | Flags::TRUNCATED_NATIVE;
        let h = Header { flags, weight: 3, handler_ns: 1500 };
        assert_eq!(Header::decode(h.encode()), h);
        let big = Header { flags: Flags::ALLOC, weight: u64::MAX, handler_ns: u64::MAX };
        let d = Header::decode(big.encode());
        assert_eq!((d.flags, d.weight, d.handler_ns), (Flags::ALLOC, Header::MAX_WEIGHT, u32::MAX as u64));
        assert!(flags.contains(Flags::WORKER) && !flags.contains(Flags::ALLOC));
        assert!(flags.truncated() && !Flags::WORKER.truncated() && Flags::TRUNCATED_R.truncated());
        // The layout other versions wrote, bit for bit.
        assert_eq!(h.encode(), 8 | 1 | 3 << 8 | 1500 << 32);
    }

    #[test]
    fn origins_carry_thread_snapshot_and_mark() {
        let o = Origin { snapshot: 5, tid: 4242, uncertain: false, process: false };
        let w = o.encode();
        assert_eq!(Origin::decode(w), Some(o));
        assert_eq!(o.marked(true), Origin { uncertain: true, ..o });
        assert_eq!(o.marked(true).marked(false), Origin { uncertain: true, ..o });
        assert_eq!(o.without_thread(), Origin::main(5));
    }

    #[test]
    fn a_written_record_splits_back() {
        let mut buf = [0u64; 8];
        let mut w = Writer::new(&mut buf);
        assert!(w.push(Entry::native(0x10, true)));
        assert!(w.push(Entry::r(3)));
        let tail = alloc_tail(17, 4096);
        assert!(w.push(tail[0]) && w.push(tail[1]));
        assert_eq!((w.len(), w.entries()), (8, 4));
        assert!(!w.push(Entry::r(4)), "a full buffer refuses, never overruns");
        let prefix = Prefix {
            header: Header { flags: Flags::ALLOC, weight: 1, handler_ns: 700 },
            origin: Origin::main(2),
            link: 11,
            context: 0x7000,
        };
        let record = w.finish(prefix).to_vec();
        let (p, entries) = split(&record).unwrap();
        assert_eq!(p, prefix);
        assert_eq!(origin_of(&record), Some(prefix.origin));
        let (stack, (number, bytes)) = split_alloc_tail(entries).unwrap();
        assert_eq!((number, bytes), (17, 4096));
        assert_eq!(stack, &[Entry::native(0x10, true), Entry::r(3)]);
        assert_eq!(split_alloc_tail(stack), None, "no tail: not an allocation's");
        assert_eq!(split(&record[..3]), None);
        let mut bad = record.clone();
        bad[1] = Entry::r(1);
        assert_eq!(split(&bad), None, "the second word must be an origin");
    }

    #[test]
    fn a_childs_origin_is_told_from_a_threads() {
        let child = Origin::child(2, 777);
        let thread = Origin { snapshot: 2, tid: 777, uncertain: false, process: false };
        assert_ne!(child.encode(), thread.encode());
        assert_eq!(Origin::decode(child.encode()).unwrap(), child);
        assert_eq!(child.without_thread(), Origin::main(2));
        // The snapshot's number keeps its 31 bits apart from the mark.
        let big = Origin::main(u32::MAX);
        assert!(!Origin::decode(big.encode()).unwrap().process);
    }

    #[test]
    fn labels_of_a_child_travel_as_records() {
        let mut buf = [0u64; 16];
        for text in [&b""[..], b"f", b"12345678", b"my_function[for]", "caf\u{e9}".as_bytes()] {
            let n = label_record(&mut buf, 99, text).unwrap();
            assert_eq!(split_label_record(&buf[..n]), Some((99, text.to_vec())));
        }
        assert_eq!(label_record(&mut buf[..3], 1, b"toolong"), None, "does not fit");
        let n = label_record(&mut buf, 5, b"abc").unwrap();
        let mut bad = buf[..n].to_vec();
        bad[2] = 100;
        assert_eq!(split_label_record(&bad), None, "a length past the words");
        let sample = Prefix { header: Header::default(), origin: Origin::main(0), link: 0, context: 0 };
        assert_eq!(split_label_record(&sample.encode()), None, "a sample is not a label");
    }

    #[test]
    fn a_resumed_record_keeps_what_was_written() {
        let mut buf = [0u64; 7];
        let mut w = Writer::new(&mut buf);
        w.push(Entry::r(1));
        let len = w.len();
        let mut w = Writer::resume(&mut buf, len);
        w.push(Entry::r(2));
        assert_eq!(w.entries(), 2);
        let rec =
            w.finish(Prefix { header: Header::default(), origin: Origin::main(0), link: 0, context: 0 });
        assert_eq!(&rec[PREFIX..], &[Entry::r(1), Entry::r(2)]);
    }
}
