//! Interning R labels inside the signal handler: a fixed arena of bytes and
//! a fixed open-addressing table, filled by the handler, read after
//! sampling stops. No allocation while sampling; when full, new labels get
//! the id [`FULL`] (and the profile says how many frames that hit).

/// Ids of labels fixed in advance.
pub const ANONYMOUS: u32 = 0;
pub const FOR: u32 = 1;
pub const WHILE: u32 = 2;
pub const REPEAT: u32 = 3;
/// A loop whose kind could not be told.
pub const LOOP: u32 = 4;
/// The table was full.
pub const FULL: u32 = 5;
/// Where a sample of another thread than R's main thread joins the stack
/// it is shown under (see `collect`): the `[thread N]` frame.
pub const THREAD: u32 = 6;
/// The same, for a thread that an R call started which had ended (or was
/// not the innermost) when the sample was taken (see `collect`).
pub const THREAD_ELSEWHERE: u32 = 7;
/// R's garbage collector running (Rprof's label).
pub const GC: u32 = 8;
/// In a sample of a forked child: where the child's own frames end and the
/// frames it inherited from its parent at the fork begin (see `compose`).
pub const PROCESS: u32 = 9;
/// `THREAD` for a thread that R's innermost call when the sample was
/// taken started (see `collect`).
pub const THREAD_HERE: u32 = 10;
/// A CPU sample that stands for the kernel's time (see
/// `capture::kernel`): the innermost entry, `[kernel]`.
pub const KERNEL: u32 = 11;
/// How many ids are fixed in advance (the same in every table).
pub const FIXED_COUNT: u32 = FIXED.len() as u32;
const FIXED: [&str; 12] = [
    "<Anonymous>",
    "[for]",
    "[while]",
    "[repeat]",
    "[loop]",
    "<label table full>",
    "[thread]",
    "[thread*]",
    "<GC>",
    "[process]",
    "[thread+]",
    "[kernel]",
];

/// Ids from here on name labels made outside the table: by forked child
/// processes, whose labels reach the parent as text (see
/// `capture::children`), and by the readers of workers (see
/// `capture::traced`). Below the 29 bits a source position's file id
/// has (see `record`).
pub const EXTRA_BASE: u32 = 1 << 28;

const SLOTS: usize = 1 << 15;
const SYMBOL_SLOTS: usize = 1 << 13;
const ARENA: usize = 1 << 20;

#[derive(Clone, Copy, Default)]
struct Entry {
    hash: u64,
    start: u32,
    len: u32,
    /// id + 1 (0: empty slot).
    id: u32,
}

pub struct Labels {
    arena: Box<[u8]>,
    used: usize,
    slots: Box<[Entry]>,
    /// Entry of each id, in order.
    by_id: Box<[(u32, u32)]>,
    count: u32,
    /// Symbol address -> id + 1.
    symbols: Box<[(usize, u32)]>,
    /// Labels from outside the table, by id from [`EXTRA_BASE`].
    extra: Vec<String>,
}

impl Default for Labels {
    fn default() -> Labels {
        Labels::new()
    }
}

impl Labels {
    pub fn new() -> Labels {
        let mut l = Labels {
            arena: vec![0; ARENA].into_boxed_slice(),
            used: 0,
            slots: vec![Entry::default(); SLOTS].into_boxed_slice(),
            by_id: vec![(0, 0); SLOTS / 2].into_boxed_slice(),
            count: 0,
            symbols: vec![(0, 0); SYMBOL_SLOTS].into_boxed_slice(),
            extra: Vec::new(),
        };
        crate::memory::prefault(&mut l.arena);
        crate::memory::prefault(&mut l.slots);
        crate::memory::prefault(&mut l.by_id);
        crate::memory::prefault(&mut l.symbols);
        for s in FIXED {
            l.intern(s.as_bytes());
        }
        l
    }

    fn hash(bytes: &[u8]) -> u64 {
        // FNV-1a: no allocation, good enough for names.
        bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
    }

    /// The id of `bytes`, added if new. Async-signal-safe.
    pub fn intern(&mut self, bytes: &[u8]) -> u32 {
        let hash = Labels::hash(bytes);
        let mut slot = (hash as usize) & (SLOTS - 1);
        for _ in 0..SLOTS {
            let e = self.slots[slot];
            if e.id == 0 {
                return self.insert(slot, hash, bytes);
            }
            if e.hash == hash && self.arena.get(e.start as usize..(e.start + e.len) as usize) == Some(bytes) {
                return e.id - 1;
            }
            slot = (slot + 1) & (SLOTS - 1);
        }
        FULL
    }

    fn insert(&mut self, slot: usize, hash: u64, bytes: &[u8]) -> u32 {
        let id = self.count;
        if self.used + bytes.len() > self.arena.len() || id as usize >= self.by_id.len() {
            return FULL;
        }
        let start = self.used;
        self.arena[start..start + bytes.len()].copy_from_slice(bytes);
        self.used += bytes.len();
        self.slots[slot] = Entry { hash, start: start as u32, len: bytes.len() as u32, id: id + 1 };
        self.by_id[id as usize] = (start as u32, bytes.len() as u32);
        self.count += 1;
        id
    }

    /// The id cached for a symbol's label. Async-signal-safe.
    pub fn symbol(&self, sym: usize) -> Option<u32> {
        let home = Labels::symbol_slot(sym);
        (0..8)
            .map(|k| self.symbols[(home + k) & (SYMBOL_SLOTS - 1)])
            .find(|&(s, _)| s == sym)
            .map(|(_, id)| id - 1)
    }

    /// Remembers a symbol's label id (symbols live as long as the
    /// session, so the cache never goes stale). Async-signal-safe.
    pub fn remember_symbol(&mut self, sym: usize, id: u32) {
        let home = Labels::symbol_slot(sym);
        let slot =
            (0..8).map(|k| (home + k) & (SYMBOL_SLOTS - 1)).find(|&s| self.symbols[s].0 == 0).unwrap_or(home);
        self.symbols[slot] = (sym, id + 1);
    }

    fn symbol_slot(sym: usize) -> usize {
        (sym.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) & (SYMBOL_SLOTS - 1)
    }

    /// The text of label `id` (after sampling).
    pub fn text(&self, id: u32) -> &str {
        if id >= EXTRA_BASE {
            return self.extra.get((id - EXTRA_BASE) as usize).map_or("<unknown label>", String::as_str);
        }
        match self.by_id.get(id as usize) {
            Some(&(start, len)) if id < self.count => {
                std::str::from_utf8(&self.arena[start as usize..(start + len) as usize])
                    .unwrap_or("<invalid UTF-8>")
            }
            _ => "<unknown label>",
        }
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// The bytes of label `id` of the table (async-signal-safe: a forked
    /// child hands its new labels to its parent from the handler).
    pub fn bytes(&self, id: u32) -> &[u8] {
        match self.by_id.get(id as usize) {
            Some(&(start, len)) if id < self.count => &self.arena[start as usize..(start + len) as usize],
            _ => b"",
        }
    }

    /// Adds labels from outside the table (after sampling): they have ids
    /// from [`EXTRA_BASE`] in order.
    pub fn set_extra(&mut self, extra: Vec<String>) {
        self.extra = extra;
    }

    /// Whether it holds only the labels every table starts with (a new
    /// table's state).
    pub fn is_new(&self) -> bool {
        self.len() == FIXED.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_and_fixed_labels() {
        let mut l = Labels::new();
        assert!(l.is_new());
        assert_eq!(l.text(FOR), "[for]");
        assert_eq!(l.text(ANONYMOUS), "<Anonymous>");
        let a = l.intern(b"f");
        let b = l.intern(b"stats::median");
        assert_eq!(l.intern(b"f"), a);
        assert_ne!(a, b);
        assert_eq!(l.text(b), "stats::median");
        assert_eq!(l.intern(b"[for]"), FOR);
        assert_eq!(l.text(999_999), "<unknown label>");
        assert_eq!(l.len(), FIXED.len() + 2);
        assert!(!l.is_new());
    }

    #[test]
    fn symbol_cache() {
        let mut l = Labels::new();
        let id = l.intern(b"g");
        assert_eq!(l.symbol(0x1000), None);
        l.remember_symbol(0x1000, id);
        assert_eq!(l.symbol(0x1000), Some(id));
    }

    #[test]
    fn a_full_table_says_so() {
        let mut l = Labels::new();
        let mut last = 0;
        for i in 0..(SLOTS as u32) {
            last = l.intern(format!("label{i}").as_bytes());
        }
        assert_eq!(last, FULL);
        assert_eq!(l.intern(b"f"), FULL);
        assert_eq!(l.text(FULL), "<label table full>");
    }
}
