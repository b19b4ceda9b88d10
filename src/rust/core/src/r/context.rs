//! Reading R's context chain (`R_GlobalContext` → `nextcontext` → …).
//!
//! Every R function call has a context record, usually a local variable of
//! the libR C function that made the call, so its address tells which native
//! frame owns it. Only the stable prefix of `RCNTXT` is read; offsets come
//! from the C compiler (`csrc/rcontext_layout.c`). Nothing read here is
//! trusted until `check_frames` has matched it against `sys.frames()`.
//!
//! Reads never fault: addresses on the live stack are read directly, all
//! others through `process_vm_readv` on our own pid, which reports a bad
//! address as an error instead of a segfault.

use super::layout::{Layout, CTXT_FUNCTION, CTXT_MAX, CTXT_TOPLEVEL};
use crate::memory::Memory;

/// One context as read from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RContext {
    pub addr: usize,
    pub next: usize,
    pub callflag: i32,
    pub evaldepth: i32,
    pub callfun: usize,
    pub sysparent: usize,
    pub call: usize,
    pub cloenv: usize,
    /// R_BCIntActive when the record was made: byte code was running.
    pub bcintactive: i32,
    /// R_BCbody then: the byte code being run.
    pub bcbody: usize,
    /// R_BCpc then: the address of the running interpreter loop's
    /// program-counter slot, a local variable of that loop's C frame.
    pub bcpc: usize,
    /// The program counter's offset in `bcbody` then (R >= 4.4).
    pub relpc: Option<isize>,
    pub srcref: usize,
}

impl RContext {
    #[inline]
    pub fn is_function(&self) -> bool {
        self.callflag & CTXT_FUNCTION != 0
    }

    /// The address of the program-counter slot of the interpreter loop that
    /// runs this record's call, if the record says byte code was running and
    /// the slot lies in `stack` (the live C stack); None otherwise.
    pub fn runner(&self, stack: (usize, usize)) -> Option<usize> {
        let aligned = self.bcpc.is_multiple_of(std::mem::align_of::<usize>());
        (self.bcintactive == 1 && aligned && self.bcpc >= stack.0 && self.bcpc < stack.1).then_some(self.bcpc)
    }
}

use crate::error::{Error, Result};

/// Why reading the chain stopped before the top-level context (no
/// allocation: the signal handlers use the chain too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// A null `nextcontext` on a record that is not the top level's, or a
    /// null first record.
    Empty,
    Misaligned(usize),
    /// More records than the reader's limit (a cycle?).
    TooLong(usize),
    Unreadable(usize),
    /// A field no real record holds: the layout is wrong, or the record was
    /// being written (torn) when it was read.
    Callflag(usize, i32),
    Bcintactive(usize, i32),
    /// The last record is not the top-level context.
    NoTopLevel,
}

impl From<Broken> for Error {
    fn from(b: Broken) -> Error {
        match b {
            Broken::Empty => Error::Inconsistent("context chain is empty".into()),
            Broken::Misaligned(a) => Error::Inconsistent(format!("misaligned context address {a:#x}")),
            Broken::TooLong(n) => Error::Inconsistent(format!("context chain longer than {n} (cycle?)")),
            Broken::Unreadable(a) => Error::Unreadable(format!("unreadable context at {a:#x}")),
            Broken::Callflag(a, v) => Error::Inconsistent(format!("implausible callflag {v} at {a:#x}")),
            Broken::Bcintactive(a, v) => {
                Error::Inconsistent(format!("implausible bcintactive {v} at {a:#x}"))
            }
            Broken::NoTopLevel => Error::Inconsistent("context chain does not end at the top level".into()),
        }
    }
}

/// R's context chain from one record outwards, innermost first, read
/// through `mem` one field at a time: the one reader of the chain, used by
/// joint traces, the profiler's signal handler, throw capture and the crash
/// report. Allocates nothing. Yields every record up to and including the
/// top-level context (whose `nextcontext` is NULL), then stops; a record
/// that cannot be read or is implausible yields `Err` once and ends the
/// iteration.
pub struct Chain<'a, M: Memory + ?Sized> {
    mem: &'a M,
    layout: &'a Layout,
    addr: usize,
    read: usize,
    limit: usize,
    done: bool,
}

impl<'a, M: Memory + ?Sized> Chain<'a, M> {
    /// The chain from the record at `first`, at most `limit` records.
    pub fn new(mem: &'a M, layout: &'a Layout, first: usize, limit: usize) -> Chain<'a, M> {
        Chain { mem, layout, addr: first, read: 0, limit, done: false }
    }

    /// The chain from the record in R's variable `R_GlobalContext` (at
    /// address `global_context`).
    pub fn from_global(mem: &'a M, layout: &'a Layout, global_context: usize, limit: usize) -> Chain<'a, M> {
        match mem.word(global_context) {
            Some(first) => Chain::new(mem, layout, first, limit),
            None => Chain { done: true, ..Chain::new(mem, layout, 0, limit) },
        }
    }

    fn record(&self, addr: usize) -> std::result::Result<RContext, Broken> {
        // Memory read in place is checked once for the whole record; where
        // each read costs a system call, the record is copied at once (on
        // the stack: the signal handlers use this too) and its fields read
        // from the copy; elsewhere field by field.
        if let Some(bytes) = self.mem.in_place(addr, self.layout.size) {
            return decode(&Copied { base: addr, bytes }, self.layout, addr);
        }
        let mut copy = [0u8; RECORD_MAX];
        if self.mem.bulk() && self.layout.size <= RECORD_MAX {
            let bytes = &mut copy[..self.layout.size];
            if !self.mem.read(addr, bytes) {
                return Err(Broken::Unreadable(addr));
            }
            return decode(&Copied { base: addr, bytes }, self.layout, addr);
        }
        decode(self.mem, self.layout, addr)
    }
}

/// The bytes of a record as large as this are copied at once (R's are
/// under 400 bytes).
const RECORD_MAX: usize = 1024;

/// A copied record, read as memory at its own address.
struct Copied<'a> {
    base: usize,
    bytes: &'a [u8],
}

impl Memory for Copied<'_> {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let Some(at) = addr.checked_sub(self.base) else { return false };
        match self.bytes.get(at..at + buf.len()) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        }
    }
}

/// Reads the record at `addr` field by field from `m`.
fn decode<M: Memory + ?Sized>(m: &M, l: &Layout, addr: usize) -> std::result::Result<RContext, Broken> {
    let word = |off: usize| m.word(addr + off).ok_or(Broken::Unreadable(addr));
    let int = |off: usize| m.int(addr + off).ok_or(Broken::Unreadable(addr));
    let callflag = int(l.callflag)?;
    if !(0..=CTXT_MAX).contains(&callflag) {
        return Err(Broken::Callflag(addr, callflag));
    }
    // R_BCIntActive is 0 or 1; anything else means the layout is wrong.
    let bcintactive = int(l.bcintactive)?;
    if !(0..=1).contains(&bcintactive) {
        return Err(Broken::Bcintactive(addr, bcintactive));
    }
    Ok(RContext {
        addr,
        next: word(l.next)?,
        callflag,
        evaldepth: int(l.evaldepth)?,
        callfun: word(l.callfun)?,
        sysparent: word(l.sysparent)?,
        call: word(l.call)?,
        cloenv: word(l.cloenv)?,
        bcintactive,
        bcbody: word(l.bcbody)?,
        bcpc: word(l.bcpc)?,
        relpc: match l.relpc {
            Some(o) => Some(word(o)? as isize),
            None => None,
        },
        srcref: word(l.srcref)?,
    })
}

impl<M: Memory + ?Sized> Iterator for Chain<'_, M> {
    type Item = std::result::Result<RContext, Broken>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let addr = self.addr;
        let out = if addr == 0 {
            Err(Broken::Empty)
        } else if !addr.is_multiple_of(std::mem::align_of::<usize>()) {
            Err(Broken::Misaligned(addr))
        } else if self.read >= self.limit {
            Err(Broken::TooLong(self.limit))
        } else {
            self.record(addr).and_then(|c| match c.next {
                0 if c.callflag != CTXT_TOPLEVEL => Err(Broken::NoTopLevel),
                _ => Ok(c),
            })
        };
        self.read += 1;
        match out {
            Ok(c) if c.next != 0 => self.addr = c.next,
            _ => self.done = true,
        }
        Some(out)
    }
}

/// Reads the whole chain starting at `first`, innermost first, ending with
/// the top-level context.
pub fn read_chain(mem: &dyn Memory, first: usize, layout: &Layout, limit: usize) -> Result<Vec<RContext>> {
    Chain::new(mem, layout, first, limit).map(|c| c.map_err(Error::from)).collect()
}

/// Checks the chain against R's own view of the call stack. `frames` are the
/// environments of `sys.frames()` taken by an R function that then (maybe
/// through further R calls of its own) reached the capture, so the chain's
/// function contexts, outermost first, must begin with exactly those frames
/// (pointer-identical environments). Returns all function contexts numbered
/// as R numbers frames (1 = outermost).
pub fn check_frames(chain: &[RContext], frames: &[usize]) -> Result<Vec<(usize, RContext)>> {
    let functions: Vec<RContext> = chain.iter().rev().filter(|c| c.is_function()).copied().collect();
    if functions.len() < frames.len() {
        return Err(Error::Inconsistent(format!(
            "context chain has {} function contexts but sys.nframe() is {}",
            functions.len(),
            frames.len()
        )));
    }
    for (k, (ctx, &env)) in functions.iter().zip(frames).enumerate() {
        if ctx.cloenv != env {
            return Err(Error::Inconsistent(format!(
                "context of frame {} does not hold sys.frame({})",
                k + 1,
                k + 1
            )));
        }
    }
    Ok(functions.into_iter().enumerate().map(|(k, c)| (k + 1, c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Image;
    use crate::r::layout::CTXT_BUILTIN;

    fn put(mem: &mut Image, l: &Layout, c: &RContext) {
        let mut b = vec![0u8; l.size];
        b[l.next..l.next + 8].copy_from_slice(&c.next.to_ne_bytes());
        b[l.callflag..l.callflag + 4].copy_from_slice(&c.callflag.to_ne_bytes());
        b[l.call..l.call + 8].copy_from_slice(&c.call.to_ne_bytes());
        b[l.cloenv..l.cloenv + 8].copy_from_slice(&c.cloenv.to_ne_bytes());
        b[l.bcintactive..l.bcintactive + 4].copy_from_slice(&c.bcintactive.to_ne_bytes());
        b[l.bcpc..l.bcpc + 8].copy_from_slice(&c.bcpc.to_ne_bytes());
        mem.put(c.addr, b);
    }

    fn ctx(addr: usize, next: usize, callflag: i32, cloenv: usize) -> RContext {
        RContext { addr, next, callflag, cloenv, ..Default::default() }
    }

    #[test]
    fn reads_and_checks_a_chain() {
        let l = Layout::for_r((4, 2)).unwrap();
        let mut mem = Image::new();
        put(&mut mem, &l, &ctx(0x1000, 0x2000, CTXT_FUNCTION, 0xe2));
        put(&mut mem, &l, &ctx(0x2000, 0x3000, CTXT_BUILTIN, 0));
        put(&mut mem, &l, &ctx(0x3000, 0x4000, CTXT_FUNCTION, 0xe1));
        put(&mut mem, &l, &ctx(0x4000, 0, CTXT_TOPLEVEL, 0));
        let chain = read_chain(&mem, 0x1000, &l, 100).unwrap();
        assert_eq!(chain.len(), 4);
        let f = check_frames(&chain, &[0xe1, 0xe2]).unwrap();
        assert_eq!(f.iter().map(|(k, c)| (*k, c.addr)).collect::<Vec<_>>(), vec![(1, 0x3000), (2, 0x1000)]);
        // A prefix (frames taken further out) is fine; more frames than
        // contexts, or a different frame, is not.
        assert_eq!(check_frames(&chain, &[0xe1]).unwrap().len(), 2);
        assert!(check_frames(&chain, &[0xe1, 0xe2, 0xe3]).unwrap_err().to_string().contains("sys.nframe"));
        assert!(check_frames(&chain, &[0xe2, 0xe1]).unwrap_err().to_string().contains("sys.frame(1)"));
    }

    #[test]
    fn rejects_broken_chains() {
        let l = Layout::for_r((4, 2)).unwrap();
        let mut mem = Image::new();
        put(&mut mem, &l, &ctx(0x1000, 0x2000, CTXT_FUNCTION, 1));
        assert!(read_chain(&mem, 0x1000, &l, 100).unwrap_err().to_string().contains("unreadable"));
        put(&mut mem, &l, &ctx(0x2000, 0x1000, CTXT_FUNCTION, 1));
        assert!(read_chain(&mem, 0x1000, &l, 100).unwrap_err().to_string().contains("cycle"));
        put(&mut mem, &l, &ctx(0x2000, 0, 9999, 1));
        assert!(read_chain(&mem, 0x1000, &l, 100).unwrap_err().to_string().contains("callflag"));
        put(&mut mem, &l, &ctx(0x2000, 0, CTXT_FUNCTION, 1));
        assert!(read_chain(&mem, 0x1000, &l, 100).unwrap_err().to_string().contains("top level"));
        put(&mut mem, &l, &RContext { bcintactive: 7, ..ctx(0x2000, 0, CTXT_TOPLEVEL, 1) });
        assert!(read_chain(&mem, 0x1000, &l, 100).unwrap_err().to_string().contains("bcintactive"));
        assert!(read_chain(&mem, 0, &l, 100).is_err());
        assert!(read_chain(&mem, 0x1001, &l, 100).unwrap_err().to_string().contains("misaligned"));
    }

    #[test]
    fn runner_needs_byte_code_and_a_stack_slot() {
        let stack = (0x7000, 0x8000);
        let c = RContext { bcintactive: 1, bcpc: 0x7f00, ..Default::default() };
        assert_eq!(c.runner(stack), Some(0x7f00));
        assert_eq!(RContext { bcintactive: 0, ..c }.runner(stack), None);
        assert_eq!(RContext { bcpc: 0x9000, ..c }.runner(stack), None);
        assert_eq!(RContext { bcpc: 0x7f01, ..c }.runner(stack), None);
        assert_eq!(RContext { bcpc: 0, ..c }.runner(stack), None);
    }

    #[test]
    fn the_iterator_yields_records_then_one_error_for_a_torn_record() {
        let l = Layout::for_r((4, 5)).unwrap();
        let mut mem = Image::new();
        put(&mut mem, &l, &ctx(0x1000, 0x2000, CTXT_FUNCTION, 0xe2));
        put(&mut mem, &l, &ctx(0x2000, 0x3000, CTXT_BUILTIN, 0));
        put(&mut mem, &l, &ctx(0x3000, 0, CTXT_TOPLEVEL, 0));
        let all: Vec<_> = Chain::new(&mem, &l, 0x1000, 10).collect();
        assert_eq!(all.iter().map(|c| c.unwrap().addr).collect::<Vec<_>>(), vec![0x1000, 0x2000, 0x3000]);
        // The middle record torn while it was read (half a word written).
        put(&mut mem, &l, &RContext { callflag: -5, ..ctx(0x2000, 0x3000, CTXT_BUILTIN, 0) });
        let got: Vec<_> = Chain::new(&mem, &l, 0x1000, 10).collect();
        assert_eq!(got.len(), 2, "stops after the error");
        assert!(got[0].is_ok());
        assert_eq!(got[1], Err(Broken::Callflag(0x2000, -5)));
        // Reading from R_GlobalContext; an unreadable variable gives nothing.
        mem.put_word(0x10, 0x3000);
        assert_eq!(Chain::from_global(&mem, &l, 0x10, 10).count(), 1);
        assert_eq!(Chain::from_global(&mem, &l, 0x99_0000, 10).count(), 0);
        // A limit reached is an error of its own.
        put(&mut mem, &l, &ctx(0x4000, 0x4000, CTXT_BUILTIN, 0));
        let looped: Vec<_> = Chain::new(&mem, &l, 0x4000, 3).collect();
        assert_eq!(looped.last(), Some(&Err(Broken::TooLong(3))));
    }

    /// Memory that asks for whole records (as the kernel-backed sources do).
    struct Bulk<'a>(&'a Image);

    impl Memory for Bulk<'_> {
        #[inline]
        fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
            self.0.read(addr, buf)
        }
        fn bulk(&self) -> bool {
            true
        }
    }

    #[test]
    fn byte_code_fields_per_version_read_whole_or_by_field() {
        for v in [(4, 2), (4, 5)] {
            let l = Layout::for_r(v).unwrap();
            let mut mem = Image::new();
            let inner = RContext { bcintactive: 1, bcpc: 0x7f08, ..ctx(0x1000, 0x2000, CTXT_FUNCTION, 0xe1) };
            put(&mut mem, &l, &inner);
            put(&mut mem, &l, &ctx(0x2000, 0, CTXT_TOPLEVEL, 0));
            let fields = read_chain(&mem, 0x1000, &l, 10).unwrap();
            let whole = read_chain(&Bulk(&mem), 0x1000, &l, 10).unwrap();
            assert_eq!(fields, whole);
            assert_eq!((whole[0].bcintactive, whole[0].bcpc), (1, 0x7f08));
            assert_eq!(whole[0].relpc.is_some(), v >= (4, 4));
            // A record cut short is unreadable either way.
            let mut short = Image::new();
            short.put(0x1000, vec![0; l.size - 8]);
            assert_eq!(
                Chain::new(&Bulk(&short), &l, 0x1000, 10).next(),
                Some(Err(Broken::Unreadable(0x1000)))
            );
        }
    }
}
