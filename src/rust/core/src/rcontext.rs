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

/// `callflag` bits (R's Defn.h).
pub const CTXT_TOPLEVEL: i32 = 0;
pub const CTXT_FUNCTION: i32 = 4;
pub const CTXT_BUILTIN: i32 = 64;
/// Largest valid `callflag` (all defined bits set).
const CTXT_MAX: i32 = 255;

/// The R version running, as `(major, minor)`.
pub type RVersion = (u32, u32);

/// Byte offsets of the fields read, and the size of the part read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub next: usize,
    pub callflag: usize,
    pub evaldepth: usize,
    pub callfun: usize,
    pub sysparent: usize,
    pub call: usize,
    pub cloenv: usize,
    pub bcintactive: usize,
    pub bcbody: usize,
    pub bcpc: usize,
    /// R >= 4.4 only.
    pub relpc: Option<usize>,
    pub srcref: usize,
    pub size: usize,
}

#[cfg(target_os = "linux")]
extern "C" {
    fn winch_rcontext_layout(variant: std::ffi::c_int, out: *mut usize) -> std::ffi::c_int;
}

/// The newest R version whose `RCNTXT` winch knows.
pub const NEWEST_KNOWN: RVersion = (4, 6);

impl Layout {
    /// The layout of `RCNTXT` in R `version` for this platform's C ABI, or
    /// None where it is not known (R before 4.0, or no shim here). Versions
    /// after the newest known one are assumed unchanged: everything read is
    /// validated before use, so a changed layout means a fallback, not
    /// wrong output.
    #[cfg(not(target_os = "linux"))]
    pub fn for_r(_version: RVersion) -> Option<Layout> {
        None
    }

    #[cfg(target_os = "linux")]
    pub fn for_r(version: RVersion) -> Option<Layout> {
        let variant = match version {
            (4, 0..=3) => 40,
            (4, _) | (5.., _) => 44,
            _ => return None,
        };
        let mut v = [0usize; 13];
        // SAFETY: the shim writes at most 13 values into `v`.
        if unsafe { winch_rcontext_layout(variant, v.as_mut_ptr()) } == 0 {
            return None;
        }
        Some(Layout {
            next: v[0],
            callflag: v[1],
            evaldepth: v[2],
            callfun: v[3],
            sysparent: v[4],
            call: v[5],
            cloenv: v[6],
            bcintactive: v[7],
            bcbody: v[8],
            bcpc: v[9],
            relpc: (v[10] != usize::MAX).then_some(v[10]),
            srcref: v[11],
            size: v[12],
        })
    }
}

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

/// Reads process memory.
pub trait Memory {
    /// Fills `buf` from `addr`; false if any byte is unreadable.
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool;
}

/// This process's memory: direct reads on the live part of the current
/// thread's stack and on R's node stack (where R >= 4.4 keeps the records of
/// byte-code calls), kernel copies (`crate::memory`) elsewhere. Where the
/// kernel refuses those copies (a seccomp profile), `fallback` ranges,
/// writable data of R's own library (where R keeps its top-level context),
/// are read directly; anything else is then unreadable and placement falls
/// back.
pub struct LiveMemory {
    /// [stack_lo, stack_hi): the live part of the current thread's stack, or
    /// an empty range when the reader is not on its thread's stack.
    pub stack_lo: usize,
    pub stack_hi: usize,
    /// Heap memory that stays mapped while R runs (R's node stack, allocated
    /// once at start-up and never freed).
    pub always: Vec<(usize, usize)>,
    pub fallback: Vec<(usize, usize)>,
}

impl LiveMemory {
    /// The memory of the calling thread, seen from address `here` in the
    /// caller's frame.
    pub fn new(here: usize, always: Vec<(usize, usize)>, fallback: Vec<(usize, usize)>) -> LiveMemory {
        let (stack_lo, stack_hi) = crate::stack::live_range(here).unwrap_or((0, 0));
        LiveMemory { stack_lo, stack_hi, always, fallback }
    }
}

impl Memory for LiveMemory {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let Some(end) = addr.checked_add(buf.len()) else { return false };
        let direct = |lo: usize, hi: usize| addr >= lo && end <= hi;
        if direct(self.stack_lo, self.stack_hi) {
            // SAFETY: the range lies in the mapped, live part of our stack.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
            return true;
        }
        if self.always.iter().any(|&(lo, hi)| direct(lo, hi)) {
            // SAFETY: a range that stays mapped (see the field's docs).
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
            return true;
        }
        if crate::memory::available() {
            return crate::memory::read(addr, buf);
        }
        if self.fallback.iter().any(|&(lo, hi)| direct(lo, hi)) {
            // SAFETY: writable data of a loaded module (see the type's docs).
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
            return true;
        }
        false
    }
}

fn word(bytes: &[u8], at: usize) -> usize {
    const N: usize = std::mem::size_of::<usize>();
    let mut w = [0u8; N];
    w.copy_from_slice(&bytes[at..at + N]);
    usize::from_ne_bytes(w)
}

fn int(bytes: &[u8], at: usize) -> i32 {
    i32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Reads the chain starting at `first`, innermost first, ending with the
/// top-level context (whose `nextcontext` is NULL).
pub fn read_chain(mem: &dyn Memory, first: usize, layout: &Layout, limit: usize) -> Result<Vec<RContext>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; layout.size];
    let mut addr = first;
    loop {
        if addr == 0 {
            return Err(Error::Inconsistent("context chain is empty".into()));
        }
        if !addr.is_multiple_of(std::mem::align_of::<usize>()) {
            return Err(Error::Inconsistent(format!("misaligned context address {addr:#x}")));
        }
        if out.len() >= limit {
            return Err(Error::Inconsistent(format!("context chain longer than {limit} (cycle?)")));
        }
        if !mem.read(addr, &mut buf) {
            return Err(Error::Unreadable(format!("unreadable context at {addr:#x}")));
        }
        let ctx = RContext {
            addr,
            next: word(&buf, layout.next),
            callflag: int(&buf, layout.callflag),
            evaldepth: int(&buf, layout.evaldepth),
            callfun: word(&buf, layout.callfun),
            sysparent: word(&buf, layout.sysparent),
            call: word(&buf, layout.call),
            cloenv: word(&buf, layout.cloenv),
            bcintactive: int(&buf, layout.bcintactive),
            bcbody: word(&buf, layout.bcbody),
            bcpc: word(&buf, layout.bcpc),
            relpc: layout.relpc.map(|o| word(&buf, o) as isize),
            srcref: word(&buf, layout.srcref),
        };
        if !(0..=CTXT_MAX).contains(&ctx.callflag) {
            return Err(Error::Inconsistent(format!("implausible callflag {} at {addr:#x}", ctx.callflag)));
        }
        // R_BCIntActive is 0 or 1; anything else means the layout is wrong.
        if !(0..=1).contains(&ctx.bcintactive) {
            return Err(Error::Inconsistent(format!(
                "implausible bcintactive {} at {addr:#x}",
                ctx.bcintactive
            )));
        }
        out.push(ctx);
        if ctx.next == 0 {
            if ctx.callflag != CTXT_TOPLEVEL {
                return Err(Error::Inconsistent("context chain does not end at the top level".into()));
            }
            return Ok(out);
        }
        addr = ctx.next;
    }
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
    use std::collections::HashMap;

    /// Synthetic memory: a map from address to bytes.
    #[derive(Default)]
    struct FakeMemory(HashMap<usize, Vec<u8>>);

    impl Memory for FakeMemory {
        fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
            match self.0.get(&addr) {
                Some(b) if b.len() >= buf.len() => {
                    buf.copy_from_slice(&b[..buf.len()]);
                    true
                }
                _ => false,
            }
        }
    }

    fn put(mem: &mut FakeMemory, l: &Layout, c: &RContext) {
        let mut b = vec![0u8; l.size];
        b[l.next..l.next + 8].copy_from_slice(&c.next.to_ne_bytes());
        b[l.callflag..l.callflag + 4].copy_from_slice(&c.callflag.to_ne_bytes());
        b[l.call..l.call + 8].copy_from_slice(&c.call.to_ne_bytes());
        b[l.cloenv..l.cloenv + 8].copy_from_slice(&c.cloenv.to_ne_bytes());
        b[l.bcintactive..l.bcintactive + 4].copy_from_slice(&c.bcintactive.to_ne_bytes());
        b[l.bcpc..l.bcpc + 8].copy_from_slice(&c.bcpc.to_ne_bytes());
        mem.0.insert(c.addr, b);
    }

    fn ctx(addr: usize, next: usize, callflag: i32, cloenv: usize) -> RContext {
        RContext { addr, next, callflag, cloenv, ..Default::default() }
    }

    #[test]
    fn layouts_are_plausible() {
        for v in [(4, 0), (4, 2), (4, 3), (4, 4), (4, 5), (4, 6), (4, 9)] {
            let l = Layout::for_r(v).unwrap();
            assert_eq!(l.next, 0);
            assert_eq!(l.callflag, std::mem::size_of::<usize>());
            assert!(l.evaldepth > l.callflag + 64, "sigjmp_buf lies between them");
            assert_eq!(l.callfun + 8, l.sysparent);
            assert_eq!(l.call + 8, l.cloenv);
            assert_eq!(l.bcbody + 8, l.bcpc);
            assert!(l.size >= l.srcref + 8);
            assert_eq!(l.relpc.is_some(), v >= (4, 4), "{v:?}");
            #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
            {
                // Worked out by hand from Defn.h (sigjmp_buf is 200 bytes).
                assert_eq!((l.evaldepth, l.cloenv, l.bcintactive, l.bcpc), (220, 256, 304, 320));
                let want = if v >= (4, 4) { (Some(328), 384) } else { (None, 368) };
                assert_eq!((l.relpc, l.srcref), want, "{v:?}");
            }
        }
        assert!(Layout::for_r((3, 6)).is_none());
    }

    #[test]
    fn reads_and_checks_a_chain() {
        let l = Layout::for_r((4, 2)).unwrap();
        let mut mem = FakeMemory::default();
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
        let mut mem = FakeMemory::default();
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
    fn reads_byte_code_fields_per_version() {
        for v in [(4, 2), (4, 5)] {
            let l = Layout::for_r(v).unwrap();
            let mut mem = FakeMemory::default();
            let inner = RContext { bcintactive: 1, bcpc: 0x7f08, ..ctx(0x1000, 0x2000, CTXT_FUNCTION, 0xe1) };
            put(&mut mem, &l, &inner);
            put(&mut mem, &l, &ctx(0x2000, 0, CTXT_TOPLEVEL, 0));
            let chain = read_chain(&mem, 0x1000, &l, 10).unwrap();
            assert_eq!((chain[0].bcintactive, chain[0].bcpc), (1, 0x7f08));
            assert_eq!(chain[0].relpc.is_some(), v >= (4, 4));
        }
    }

    #[test]
    fn live_memory_reads_heap_and_refuses_bad_addresses() {
        let heap = Box::new([0x5au8; 64]);
        let mem = LiveMemory { stack_lo: 1, stack_hi: 2, always: Vec::new(), fallback: Vec::new() };
        let mut buf = [0u8; 64];
        assert!(mem.read(heap.as_ptr() as usize, &mut buf));
        assert_eq!(buf, [0x5a; 64]);
        assert!(!mem.read(8, &mut buf), "address 8 must be unreadable, not a crash");
        assert!(!mem.read(usize::MAX - 4, &mut buf));
    }
}
