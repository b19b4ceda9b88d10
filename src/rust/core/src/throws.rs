//! Native stacks at throw time: C++ exceptions and Rust panics.
//!
//! Both enter libgcc's `_Unwind_RaiseException` through the calling
//! module's GOT: `__cxa_throw` and `std::rethrow_exception` in libstdc++,
//! Rust's `panic_unwind` in every Rust library (std links libgcc_s
//! dynamically on linux-gnu). `__cxa_rethrow` (`throw;`) enters
//! `_Unwind_Resume_or_Rethrow` the same way. While capture is installed,
//! those GOT slots of every loaded module (and of modules loaded later: a
//! family of the GOT hook set, `got::hookset`) point to a small trampoline
//! here, which records the stack and
//! then jumps to the real function with the stack exactly as the thrower
//! left it (no frame of winch's stays in the way of the unwinder).
//!
//! The record is cheap and made without allocating, locking or calling R:
//! raw instruction and stack pointers, walked with DWARF rules read in place
//! from the loaded images (the same tables the throw itself is about to
//! read) and cached by address, stopping at the first frame of R's
//! interpreter; names come later, when a view wants them. Records go to a
//! ring of R's main thread (the only thread recorded), keyed by the thrown
//! object, so a rethrow keeps the original throw site.
//!
//! Whether a record belongs to an R error is decided later, by
//! `find_catch`: the record's outer frames must still be on the stack, the
//! frame that caught the exception at the same place running the same
//! function (see that function for the exact rule).
//!
//! Only x86_64 Linux has the trampolines; elsewhere [`supported`] is false
//! and nothing is patched.

use crate::memory::Memory;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use crate::modules::Generation;
use crate::r::ChainAt;

/// Records kept.
pub(crate) const RING: usize = 16;
/// Frames a record holds at most.
pub(crate) const MAX_FRAMES: usize = 256;

/// `exception_class` of libstdc++'s exceptions ("GNUCC++\0"), of its
/// dependent exceptions (`std::rethrow_exception`, "GNUCC++\x01"), and of
/// Rust panics (`panic_unwind`: "MOZ\0RUST" in native byte order).
pub(crate) const CLASS_GNU_CXX: u64 = 0x474e_5543_432b_2b00;
pub(crate) const CLASS_GNU_CXX_DEPENDENT: u64 = 0x474e_5543_432b_2b01;
pub(crate) const CLASS_RUST: u64 = u64::from_ne_bytes(*b"MOZ\0RUST");

/// Itanium C++ ABI as libstdc++ lays it out on 64-bit targets: the
/// `_Unwind_Exception` is the last member of `__cxa_exception` (112 bytes),
/// 80 bytes after its start, and the thrown object follows it.
const CXA_HEADER_TO_UNWIND: usize = 80;
const CXA_HEADER_SIZE: usize = 112;

/// What was thrown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThrowKind {
    /// A C++ exception of libstdc++'s runtime.
    #[default]
    Cpp,
    /// A Rust panic.
    Rust,
    /// Anything else that unwinds (another C++ runtime, another language).
    Foreign,
}

impl ThrowKind {
    pub fn name(self) -> &'static str {
        match self {
            ThrowKind::Cpp => "C++ exception",
            ThrowKind::Rust => "Rust panic",
            ThrowKind::Foreign => "foreign exception",
        }
    }
}

/// How an exception is identified.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) kind: ThrowKind,
    /// The thrown object (C++: the object itself, also for a dependent
    /// exception, which refers to its primary one; otherwise the
    /// `_Unwind_Exception`).
    pub(crate) key: usize,
    /// The C++ `std::type_info` of the thrown object (0 when unknown).
    pub(crate) type_info: usize,
    /// A dependent exception (`std::rethrow_exception`).
    pub(crate) dependent: bool,
}

/// Identifies the exception whose `_Unwind_Exception` is at `exc`, reading
/// words with `word`.
pub(crate) fn identify(exc: usize, word: impl Fn(usize) -> Option<usize>) -> Identity {
    let unknown = Identity { kind: ThrowKind::Foreign, key: exc, type_info: 0, dependent: false };
    let Some(class) = word(exc) else { return unknown };
    match class as u64 {
        CLASS_GNU_CXX => Identity {
            kind: ThrowKind::Cpp,
            key: exc + 32,
            type_info: word(exc - CXA_HEADER_TO_UNWIND).unwrap_or(0),
            dependent: false,
        },
        CLASS_GNU_CXX_DEPENDENT => {
            let primary = word(exc - CXA_HEADER_TO_UNWIND).unwrap_or(0);
            let type_info =
                if primary > CXA_HEADER_SIZE { word(primary - CXA_HEADER_SIZE).unwrap_or(0) } else { 0 };
            Identity {
                kind: ThrowKind::Cpp,
                key: if primary != 0 { primary } else { exc },
                type_info,
                dependent: true,
            }
        }
        CLASS_RUST => Identity { kind: ThrowKind::Rust, key: exc, type_info: 0, dependent: false },
        _ => unknown,
    }
}

/// One recorded throw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Throw {
    /// Order of recording (0: an empty slot).
    pub(crate) seq: u64,
    /// The top-level epoch when it was recorded (see [`next_epoch`]).
    pub(crate) epoch: u64,
    pub(crate) id: Identity,
    /// R's innermost context then and its innermost function context, each
    /// as (address, environment); see [`r_activation`].
    pub(crate) r_contexts: [(usize, usize); 2],
    /// Times it was rethrown since.
    pub(crate) rethrows: u32,
    /// The loader's generation when the frames were walked: their
    /// addresses are named with the modules of that generation (see
    /// `shown`), never with modules loaded at those addresses since.
    pub(crate) generation: Option<Generation>,
    /// The walk reached a frame of R's interpreter (and stopped there).
    pub(crate) reached_r: bool,
    /// The walk stopped before the end of the stack for another reason
    /// (frame limit, a frame it could not unwind).
    pub(crate) truncated: bool,
    pub(crate) n: usize,
    /// (instruction pointer, stack pointer) of each frame, innermost first,
    /// from the thrower's frame (`__cxa_throw`, Rust's panic runtime) on;
    /// every instruction pointer is a return address.
    pub(crate) frames: [(usize, usize); MAX_FRAMES],
}

impl Default for Throw {
    fn default() -> Throw {
        Throw {
            seq: 0,
            epoch: 0,
            id: Identity::default(),
            r_contexts: [(0, 0); 2],
            rethrows: 0,
            generation: None,
            reached_r: false,
            truncated: false,
            n: 0,
            frames: [(0, 0); MAX_FRAMES],
        }
    }
}

impl Throw {
    pub(crate) fn frames(&self) -> &[(usize, usize)] {
        &self.frames[..self.n.min(MAX_FRAMES)]
    }
}

/// The throws recorded on R's main thread, in a ring.
pub(crate) struct Ring {
    throws: Box<[Throw]>,
    next: usize,
    seq: u64,
}

impl Default for Ring {
    fn default() -> Ring {
        let mut throws = vec![Throw::default(); RING].into_boxed_slice();
        crate::memory::prefault(&mut throws);
        Ring { throws, next: 0, seq: 0 }
    }
}

impl Ring {
    /// The newest record of the exception `key`, if any.
    fn find(&mut self, key: usize) -> Option<&mut Throw> {
        self.throws.iter_mut().filter(|r| r.seq != 0 && r.id.key == key).max_by_key(|r| r.seq)
    }

    /// A slot for a new record (the oldest one), stamped.
    fn claim(&mut self) -> &mut Throw {
        self.seq += 1;
        let i = self.next;
        self.next = (self.next + 1) % self.throws.len();
        let r = &mut self.throws[i];
        r.seq = self.seq;
        r.n = 0;
        r.rethrows = 0;
        r.generation = None;
        r.reached_r = false;
        r.truncated = false;
        r
    }

    /// Copies of the throws recorded, newest first.
    pub(crate) fn newest_first(&self) -> Vec<Throw> {
        let mut v: Vec<Throw> = self.throws.iter().filter(|r| r.seq != 0).copied().collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.seq));
        v
    }
}

/// Enters a throw into `ring`: a rethrow (or a dependent exception) of an
/// exception already recorded keeps that record; anything else gets a new
/// record, which `fill` writes. Returns whether a new record was made.
pub(crate) fn enter(ring: &mut Ring, id: Identity, rethrow: bool, fill: impl FnOnce(&mut Throw)) -> bool {
    if rethrow || id.dependent {
        if let Some(r) = ring.find(id.key) {
            r.rethrows = r.rethrows.saturating_add(1);
            return false;
        }
    }
    let r = ring.claim();
    r.id = id;
    fill(r);
    true
}

/// Contexts looked at for the innermost function context.
const ACTIVATION_DEPTH: usize = 64;

/// Which activation of R code a throw happened in: R's innermost context
/// (the value of `R_GlobalContext`) and the innermost context of a closure
/// call, each as (address, environment), read from `mem`.
///
/// The innermost context alone does not tell two calls apart: a `.Call`
/// made twice from the same place gets a builtin context at the same
/// address with the same (base) environment. A closure call's environment
/// is new for every call, so a record whose closure context is no longer
/// in R's chain with the same environment belongs to an activation that
/// has ended.
pub(crate) fn r_activation(mem: &impl Memory, chain: &ChainAt) -> [(usize, usize); 2] {
    let mut out = [(0, 0); 2];
    for (k, c) in chain.read(mem, ACTIVATION_DEPTH).map_while(|c| c.ok()).enumerate() {
        if k == 0 {
            out[0] = (c.addr, c.cloenv);
        }
        if c.is_function() {
            out[1] = (c.addr, c.cloenv);
            break;
        }
    }
    out
}

/// What a frame is, for the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameClass {
    /// winch's trampoline: it and every frame inside it (the recording
    /// itself) are not recorded.
    Marker,
    /// R's interpreter: recorded, and the walk ends there.
    Interpreter,
    Other,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WalkEnd {
    /// At a frame of R's interpreter.
    ReachedR,
    /// At the outermost frame.
    Outermost,
    /// The output was full.
    Full,
    /// A frame could not be unwound with the cached rules.
    Failed,
}

/// What the throw hook keeps of a walk: (ip, sp) of the frames outside the
/// `Marker` frame (those inside it, and it, are dropped when it is met), up
/// to and including the first frame of R's interpreter.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) struct Keep<'a, C> {
    /// The class of a frame from its `probe` (its ip, minus one for return
    /// addresses).
    pub class: C,
    pub out: &'a mut [(usize, usize)],
    pub n: usize,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<C: Fn(usize) -> FrameClass> crate::unwind::walk::Visitor for Keep<'_, C> {
    type Stop = WalkEnd;

    fn frame(&mut self, frame: &crate::unwind::walk::Frame, probe: usize) -> std::ops::ControlFlow<WalkEnd> {
        use std::ops::ControlFlow::{Break, Continue};
        match (self.class)(probe) {
            FrameClass::Marker => self.n = 0,
            c => {
                let Some(slot) = self.out.get_mut(self.n) else { return Break(WalkEnd::Full) };
                *slot = (frame.ip, frame.sp);
                self.n += 1;
                if c == FrameClass::Interpreter {
                    return Break(WalkEnd::ReachedR);
                }
            }
        }
        Continue(())
    }
}

/// Walks from registers `regs` with the rules of `modules` (cached in
/// `caches`), writing (ip, sp) of the frames [`Keep`] keeps into `out`;
/// `class` classifies a frame from its probe address, `read` reads a word
/// of the stack. Returns the number written and how the walk ended
/// (`Failed`: a frame the rules do not model, for libgcc's unwinder).
/// Async-signal-safe.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) fn walk<T: crate::unwind::rules::Source>(
    modules: &crate::unwind::walk::Modules<T>,
    caches: &mut crate::unwind::walk::Caches,
    regs: crate::unwind::rules::Regs,
    read: impl Fn(usize) -> Option<usize>,
    class: impl Fn(usize) -> FrameClass,
    out: &mut [(usize, usize)],
) -> (usize, WalkEnd) {
    use crate::unwind::walk::Ended;
    let mut keep = Keep { class, out, n: 0 };
    let end = match crate::unwind::walk::walk(modules, caches, regs, read, &mut keep) {
        Ended::By(end) => end,
        Ended::Outermost => WalkEnd::Outermost,
        Ended::Stopped(_) => WalkEnd::Failed,
    };
    (keep.n, end)
}

/// Where a recorded throw was caught, in a stack captured later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Catch {
    /// The catching frame's index in the record (innermost first).
    pub in_record: usize,
    /// Its index in the current stack (innermost first).
    pub in_current: usize,
}

/// Finds the frame that caught the throw `record` (frames (ip, sp),
/// innermost first) in the `current` stack ((ip, sp) per frame, innermost
/// first), if that frame is still running.
///
/// The record's outermost frames must be in the current stack unchanged
/// (same return address at the same stack address: the same activations,
/// still calling what they called at the throw), down to a frame that is
/// at the same stack address and runs the same function (`same_function`,
/// given the record's and the current instruction pointers) but is now
/// somewhere else in it: that frame caught the exception and is handling it
/// (raising an R error, say), directly or through calls of its own. If
/// instead the frame at that stack address runs another function, or is
/// not at that stack address, the catching activation has returned: no
/// match.
pub(crate) fn find_catch(
    record: &[(usize, usize)],
    current: &[(usize, usize)],
    same_function: impl Fn(usize, usize) -> bool,
) -> Option<Catch> {
    let &(outer_ip, outer_sp) = record.last()?;
    let mut j = current.iter().position(|&(ip, sp)| sp == outer_sp && ip == outer_ip)?;
    let mut i = record.len() - 1;
    while i > 0 && j > 0 && current[j - 1] == record[i - 1] {
        i -= 1;
        j -= 1;
    }
    if i == 0 || j == 0 {
        // Every recorded frame is still there as it was: still throwing.
        return None;
    }
    let (rec_ip, rec_sp) = record[i - 1];
    let (cur_ip, cur_sp) = current[j - 1];
    (rec_sp == cur_sp && same_function(rec_ip, cur_ip))
        .then_some(Catch { in_record: i - 1, in_current: j - 1 })
}

static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Starts a new top-level epoch (R calls this after each top-level
/// expression that completed): records from earlier epochs are never
/// matched to an R error again. R's main thread, at top level.
pub fn next_epoch() {
    EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        hook::reset_guard();
        hook::free_retired();
    }
}

/// The current epoch.
pub(crate) fn epoch() -> u64 {
    EPOCH.load(std::sync::atomic::Ordering::Relaxed)
}

mod names;
pub mod shown;
pub(crate) use names::{base_function_name, demangle_type, is_r_unwind_carrier, is_throw_machinery};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod hook;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use hook::{installed, rescan_if_changed, status, uninstall};
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) use hook::{map_of, recorded};

/// Turns capture on (see `hook`), and has the loader hook refresh its walk
/// table when R loads libraries (the GOT hook set hooks them).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub fn install(setup: HookSetup) -> crate::error::Result<Status> {
    crate::loadhook::listen(crate::loadhook::THROWS, || {
        hook::refresh_table();
    });
    hook::install(setup)
}

/// Whether this platform has the throw hooks.
pub fn supported() -> bool {
    cfg!(all(target_arch = "x86_64", target_os = "linux"))
}

/// What installing the throw hooks needs to know.
#[derive(Clone, Copy, Debug, Default)]
pub struct HookSetup {
    /// R's main thread (`pthread_self()` there); the caller of `install`.
    pub(crate) main_thread: usize,
    /// An address inside R's interpreter (libR, or the R executable).
    pub(crate) interpreter_addr: usize,
    /// Where R's context chain is (None: throws are recorded without R's
    /// activation).
    pub(crate) chain: Option<ChainAt>,
    /// Hook winch's own module too (tests of the hook inside a test binary,
    /// where winch's code and the code that panics share a module).
    pub(crate) patch_own: bool,
    /// The functions hooked slots lead to; None: libgcc's (tests run where
    /// another unwinder provides them).
    pub(crate) targets: Option<[usize; 2]>,
}

impl HookSetup {
    /// What installing needs, from the facts about the running R (called on
    /// R's main thread).
    pub fn from_r(r: &crate::r::Facts) -> HookSetup {
        HookSetup {
            main_thread: r.main_thread,
            interpreter_addr: r.interpreter_addr,
            chain: Some(r.chain()),
            patch_own: false,
            targets: None,
        }
    }
}

/// What capture covers.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// GOT slots pointing to the hooks.
    pub slots: usize,
    /// Modules with at least one such slot.
    pub modules: usize,
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod unsupported {
    use super::{HookSetup, Status, Throw};
    use crate::error::{Error, Result};

    pub fn install(_setup: HookSetup) -> Result<Status> {
        Err(Error::Unavailable("capturing throws needs x86_64 Linux".into()))
    }
    pub fn uninstall() -> Result<usize> {
        Ok(0)
    }
    pub fn installed() -> bool {
        false
    }
    pub fn rescan_if_changed() {}
    pub fn status() -> Status {
        Status::default()
    }
    pub fn recorded() -> Vec<Throw> {
        Vec::new()
    }
    pub fn map_of(
        _generation: Option<crate::modules::Generation>,
    ) -> Option<std::sync::Arc<crate::modules::ModuleMap>> {
        None
    }
}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub use unsupported::{install, installed, rescan_if_changed, status, uninstall};
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) use unsupported::{map_of, recorded};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::rules::{Base, Regs, Rule, SavedBp};
    use crate::unwind::walk::synthetic::Made;
    use crate::unwind::walk::{Caches, Modules, Sizes};
    use std::collections::HashMap;

    #[test]
    fn identifies_cpp_dependent_rust_and_foreign_exceptions() {
        let mut mem = HashMap::new();
        // A C++ exception: header at 0x1000, unwind header at 0x1050.
        mem.insert(0x1050usize, CLASS_GNU_CXX as usize);
        mem.insert(0x1000, 0xabc0); // type_info
        let id = identify(0x1050, |a| mem.get(&a).copied());
        assert_eq!(id, Identity { kind: ThrowKind::Cpp, key: 0x1070, type_info: 0xabc0, dependent: false });
        // A dependent exception referring to that object.
        mem.insert(0x2050, CLASS_GNU_CXX_DEPENDENT as usize);
        mem.insert(0x2000, 0x1070);
        let id = identify(0x2050, |a| mem.get(&a).copied());
        assert_eq!(id, Identity { kind: ThrowKind::Cpp, key: 0x1070, type_info: 0xabc0, dependent: true });
        mem.insert(0x3000, CLASS_RUST as usize);
        assert_eq!(identify(0x3000, |a| mem.get(&a).copied()).kind, ThrowKind::Rust);
        mem.insert(0x4000, u64::from_be_bytes(*b"CLNGC++\0") as usize);
        let id = identify(0x4000, |a| mem.get(&a).copied());
        assert_eq!((id.kind, id.key, id.type_info), (ThrowKind::Foreign, 0x4000, 0));
        assert_eq!(identify(0x5000, |_| None).kind, ThrowKind::Foreign);
    }

    #[test]
    fn the_activation_is_the_innermost_and_the_closure_context() {
        use crate::memory::Image;
        use crate::r::layout::{Layout, CTXT_BUILTIN, CTXT_FUNCTION, CTXT_TOPLEVEL};
        let layout = Layout::for_r((4, 5)).unwrap();
        let mut mem = Image::new();
        let put = |mem: &mut Image, addr: usize, next: usize, flag: i32, cloenv: usize| {
            mem.put(addr, vec![0; layout.size]);
            mem.put_word(addr + layout.next, next);
            mem.put_bytes(addr + layout.callflag, &flag.to_ne_bytes());
            mem.put_word(addr + layout.cloenv, cloenv);
        };
        let at = |first: usize, mem: &mut Image| {
            mem.put_word(0x100, first);
            ChainAt { global_context: 0x100, layout }
        };
        // A builtin context (.Call) inside a closure call inside top level.
        put(&mut mem, 0x1000, 0x2000, CTXT_BUILTIN, 0xba5e);
        put(&mut mem, 0x2000, 0x3000, CTXT_FUNCTION, 0xe1);
        put(&mut mem, 0x3000, 0, CTXT_TOPLEVEL, 0x610b);
        let c = at(0x1000, &mut mem);
        assert_eq!(r_activation(&mem, &c), [(0x1000, 0xba5e), (0x2000, 0xe1)]);
        // The closure context itself innermost.
        let c = at(0x2000, &mut mem);
        assert_eq!(r_activation(&mem, &c), [(0x2000, 0xe1), (0x2000, 0xe1)]);
        // Top level only; no context; a loop in the chain; a torn record
        // (an implausible callflag) ends the search.
        let c = at(0x3000, &mut mem);
        assert_eq!(r_activation(&mem, &c), [(0x3000, 0x610b), (0, 0)]);
        let c = at(0, &mut mem);
        assert_eq!(r_activation(&mem, &c), [(0, 0); 2]);
        put(&mut mem, 0x4000, 0x4000, CTXT_BUILTIN, 1);
        let c = at(0x4000, &mut mem);
        assert_eq!(r_activation(&mem, &c), [(0x4000, 1), (0, 0)]);
        put(&mut mem, 0x5000, 0x2000, 9999, 1);
        let c = at(0x5000, &mut mem);
        assert_eq!(r_activation(&mem, &c), [(0, 0); 2]);
    }

    #[test]
    fn rethrows_keep_the_first_record() {
        let mut ring = Ring::default();
        let id = Identity { kind: ThrowKind::Cpp, key: 0x70, type_info: 1, dependent: false };
        assert!(enter(&mut ring, id, false, |r| r.n = 3));
        // `throw;` of the same object, and std::rethrow_exception of it.
        assert!(!enter(&mut ring, id, true, |r| r.n = 9));
        assert!(!enter(&mut ring, Identity { dependent: true, ..id }, false, |r| r.n = 9));
        let v = ring.newest_first();
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].n, v[0].rethrows), (3, 2));
        // A new throw of an object at the same address is a new record.
        assert!(enter(&mut ring, id, false, |r| r.n = 5));
        // A rethrow of something never recorded (thrown before capture was
        // on) starts a record.
        let other = Identity { key: 0x90, ..id };
        assert!(enter(&mut ring, other, true, |r| r.n = 7));
        let v = ring.newest_first();
        assert_eq!(v.iter().map(|r| r.n).collect::<Vec<_>>(), vec![7, 5, 3]);
    }

    #[test]
    fn the_ring_keeps_the_newest() {
        let mut ring = Ring::default();
        for k in 0..(RING + 5) {
            let id = Identity { key: 0x1000 + k, ..Identity::default() };
            enter(&mut ring, id, false, |r| r.n = k);
        }
        let v = ring.newest_first();
        assert_eq!(v.len(), RING);
        assert_eq!(v[0].n, RING + 4);
        assert_eq!(v[RING - 1].n, 5);
    }

    /// A synthetic stack: frames with rbp-free rules (CFA = sp + 16, return
    /// address at CFA - 8). Frame k's code lies at 0x1000 * (k + 1).
    fn synthetic_stack(ips: &[usize], sp0: usize) -> HashMap<usize, usize> {
        let mut mem = HashMap::new();
        for (k, &ip) in ips.iter().enumerate().skip(1) {
            // Frame k-1's CFA is sp0 + 16 k; the return address lies below.
            mem.insert(sp0 + 16 * k - 8, ip);
        }
        mem.insert(sp0 + 16 * ips.len() - 8, 0); // end of the stack
        mem
    }

    /// One made-up module of code from 0x1000 to 0x6000, functions of 0x1000
    /// bytes, each with the one rule `rule`.
    fn made_up(rule: Rule) -> Modules<Made> {
        let m = crate::modules::Module::synthetic("/made/up.so", 0x1000, 0x6000, false);
        Modules::synthetic(vec![(m, Some(Made::uniform(0x1000, 0x6000, 0x1000, rule)))], None)
    }

    #[test]
    fn walks_drop_the_hook_and_stop_at_r() {
        // The recording (0x1010), the trampoline (0x1020), the thrower...
        let ips = [0x1010, 0x1020, 0x2010, 0x3010, 0x4010, 0x5010];
        let mem = synthetic_stack(&ips, 0x10000);
        let step = Rule::Step { cfa: Base::Sp, cfa_offset: 16, ra_offset: -8, bp: SavedBp::Same, start: 0 };
        let modules = made_up(step);
        let mut caches = Caches::new(Sizes::THROWS);
        let class = |ip: usize| match ip >> 12 {
            1 if ip & 0xfff == 0x1f => FrameClass::Marker,
            4 => FrameClass::Interpreter,
            _ => FrameClass::Other,
        };
        let mut out = [(0, 0); 8];
        let regs = Regs { ip: ips[0], sp: 0x10000, bp: None };
        let read = |a: usize| mem.get(&a).copied();
        // Twice: the second walk runs on cached rules.
        for _ in 0..2 {
            let (n, end) = walk(&modules, &mut caches, regs, read, class, &mut out);
            assert_eq!(end, WalkEnd::ReachedR);
            assert_eq!(&out[..n], &[(0x2010, 0x10020), (0x3010, 0x10030), (0x4010, 0x10040)]);
        }
        // Without an interpreter frame the walk goes to the end.
        let (n, end) = walk(&modules, &mut caches, regs, read, |_| FrameClass::Other, &mut out);
        assert_eq!((n, end), (6, WalkEnd::Outermost));
        // A full buffer, and a frame without a rule.
        let (n, end) = walk(&modules, &mut caches, regs, read, |_| FrameClass::Other, &mut out[..2]);
        assert_eq!((n, end), (2, WalkEnd::Full));
        let unsupported = made_up(Rule::Unsupported);
        let (n, end) = walk(&unsupported, &mut caches, regs, read, class, &mut out);
        assert_eq!((n, end), (1, WalkEnd::Failed));
        // The same caches serve the first modules again, from scratch.
        let (n, end) = walk(&modules, &mut caches, regs, read, class, &mut out);
        assert_eq!((n, end), (3, WalkEnd::ReachedR));
    }

    #[test]
    fn a_marker_past_a_full_buffer_starts_it_again() {
        // Frames 0x2010 and 0x3010 fill the buffer; the marker (0x4010)
        // drops them, and the frame outside it fits.
        let ips = [0x2010, 0x3010, 0x4010, 0x5010];
        let mem = synthetic_stack(&ips, 0x10000);
        let step = Rule::Step { cfa: Base::Sp, cfa_offset: 16, ra_offset: -8, bp: SavedBp::Same, start: 0 };
        let modules = made_up(step);
        let mut caches = Caches::new(Sizes::THROWS);
        let class = |ip: usize| if ip >> 12 == 4 { FrameClass::Marker } else { FrameClass::Other };
        let mut out = [(0, 0); 2];
        let regs = Regs { ip: ips[0], sp: 0x10000, bp: None };
        let (n, end) = walk(&modules, &mut caches, regs, |a| mem.get(&a).copied(), class, &mut out);
        assert_eq!((n, end), (1, WalkEnd::Outermost));
        assert_eq!(out[0], (0x5010, 0x10030));
    }

    /// Record: __cxa_throw, level3, level2, level1, entry (the catcher),
    /// do_dotcall (R).
    fn record() -> Vec<(usize, usize)> {
        vec![(0x9001, 100), (0x3005, 200), (0x2005, 300), (0x1005, 400), (0xe005, 500), (0xd005, 600)]
    }

    /// Functions: the thousands digit of the address.
    fn same_fn(a: usize, b: usize) -> bool {
        a >> 12 == b >> 12
    }

    #[test]
    fn the_catching_frame_raising_the_error_is_found() {
        // Now: the R error's handler frames, Rf_error, then entry at another
        // place (calling Rf_error), do_dotcall and further out as before.
        let current = vec![(0x7777, 50), (0x8888, 450), (0xe0a0, 500), (0xd005, 600), (0xc005, 700)];
        assert_eq!(find_catch(&record(), &current, same_fn), Some(Catch { in_record: 4, in_current: 2 }));
    }

    #[test]
    fn a_catching_frame_deeper_than_the_entry_is_found() {
        // level2 caught it and called a helper raising the error; level1,
        // entry and do_dotcall are unchanged.
        let current = vec![(0x8888, 250), (0x20a0, 300), (0x1005, 400), (0xe005, 500), (0xd005, 600)];
        assert_eq!(find_catch(&record(), &current, same_fn), Some(Catch { in_record: 2, in_current: 1 }));
    }

    #[test]
    fn a_returned_catcher_never_matches() {
        // The .Call returned; another function now runs at the entry's
        // stack address (called from the same place in R).
        let current = vec![(0x8888, 450), (0xf0a0, 500), (0xd005, 600)];
        assert_eq!(find_catch(&record(), &current, same_fn), None);
        // R called something else: do_dotcall's frame is not the same.
        let current = vec![(0x8888, 450), (0xe0a0, 500), (0xd0ff, 600)];
        assert_eq!(find_catch(&record(), &current, same_fn), None);
        // The same function, but at another stack address.
        let current = vec![(0x8888, 440), (0xe0a0, 480), (0xd005, 600)];
        assert_eq!(find_catch(&record(), &current, same_fn), None);
        // Nothing of the record's outer frames is left.
        assert_eq!(find_catch(&record(), &[(0xd005, 900)], same_fn), None);
        assert_eq!(find_catch(&[], &[(1, 2)], same_fn), None);
    }

    #[test]
    fn a_stack_still_throwing_does_not_match() {
        // Captured during the unwinding itself (every frame still there).
        let mut current = vec![(0x5555, 50)];
        current.extend(record());
        assert_eq!(find_catch(&record(), &current, same_fn), None);
    }
}
