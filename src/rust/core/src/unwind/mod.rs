//! Capturing the native stack of the current thread.
//!
//! Three backends walk the stack from DWARF call-frame information: winch's
//! own cached unwinder (`cfi`, x86_64 Linux, preferred: fastest), the system
//! libunwind, and libgcc's `_Unwind_Backtrace` through the `backtrace` crate
//! (portable). Their stack values per frame may mean the frame's stack
//! pointer or its canonical frame address, so each backend is calibrated once
//! against the address of a local variable and its values are normalized to
//! "the low end of the frame": the owner of a stack address `a` is the frame
//! `i` with `lo[i] <= a < lo[i + 1]`.
//!
//! `walk` is the one walker for signal handlers and hooks (the profiler,
//! throw capture, the crash report): rules prepared beforehand, no
//! allocation, no lock.

mod backtrace;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod cfi;
pub(crate) mod ehframe;
#[cfg(winch_libunwind)]
mod libunwind;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) mod rules;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) mod walk;

use std::sync::OnceLock;

/// Registers of the calling code, where a walk starts: (rip, rsp, rbp).
/// Inlined, so that they are the caller's own.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn registers() -> (usize, usize, usize) {
    let (ip, sp, bp): (usize, usize, usize);
    // SAFETY: reads three registers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (ip, sp, bp)
}

/// A stack unwinder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// winch's cached DWARF CFI unwinder (x86_64 Linux), falling back to
    /// libgcc for frames it does not model.
    Cfi,
    /// The system libunwind (`libunwind-dev`), linked through pkg-config.
    Libunwind,
    /// libgcc's unwinder through the `backtrace` crate.
    Backtrace,
}

impl Backend {
    /// In order of preference: fastest first.
    pub const ALL: [Backend; 3] = [Backend::Cfi, Backend::Libunwind, Backend::Backtrace];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Cfi => "cfi",
            Backend::Libunwind => "libunwind",
            Backend::Backtrace => "backtrace",
        }
    }

    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Whether this build contains the backend and it passed calibration.
    pub fn is_available(self) -> bool {
        compiled_in(self) && calibration(self).is_some()
    }

    /// The preferred backend that works here.
    pub fn best() -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.is_available())
    }
}

fn compiled_in(backend: Backend) -> bool {
    // Linux on 64-bit targets only: the module reader assumes ELF64.
    if !cfg!(all(target_os = "linux", target_pointer_width = "64")) {
        return false;
    }
    match backend {
        Backend::Cfi => cfg!(all(target_arch = "x86_64", target_os = "linux")),
        Backend::Libunwind => cfg!(winch_libunwind),
        Backend::Backtrace => true,
    }
}

/// One frame as a backend reports it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawFrame {
    pub ip: usize,
    /// The backend's stack value: see [`StackValue`].
    pub stack: usize,
    /// The start of the frame's procedure according to the unwind info, when
    /// it was asked for (calibration only); 0 otherwise.
    pub start: usize,
    /// A signal frame: `ip` is the interrupted instruction, not a return address.
    pub signal: bool,
}

/// Why a walk ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StackEnd {
    /// The unwinder reached a frame it considers outermost.
    Outermost,
    /// The unwinder reported an error.
    Failed(String),
    /// The frame limit was reached.
    Limit,
}

/// What a backend's stack value means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StackValue {
    /// The frame's stack pointer: the low end of its frame.
    Sp,
    /// The canonical frame address: the caller's stack pointer before the
    /// call, i.e. the high end of the frame.
    Cfa,
}

/// A normalized native frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Instruction pointer: a return address, except for signal frames and the
    /// innermost frame.
    pub(crate) ip: usize,
    /// Low end of the frame's stack memory (0 when unknown).
    pub(crate) lo: usize,
    /// `ip` is exact (innermost frame or interrupted by a signal), so symbol
    /// lookups must not use `ip - 1`.
    pub(crate) exact_ip: bool,
}

/// A captured stack, innermost frame first.
#[derive(Clone, Debug)]
pub struct Stack {
    pub backend: Backend,
    pub frames: Vec<Frame>,
    pub(crate) end: StackEnd,
}

extern "C" {
    fn _Unwind_FindEnclosingFunction(pc: *mut std::ffi::c_void) -> *mut std::ffi::c_void;
}

/// The start of the function containing `pc`, from the unwind tables of the
/// loaded modules (the unwinder's own lookup; not for signal handlers).
pub(crate) fn function_start(pc: usize) -> Option<usize> {
    if pc == 0 || !compiled_in(Backend::Backtrace) {
        return None;
    }
    // SAFETY: a lookup in the loaded modules' unwind tables; any address is
    // allowed (unknown ones give NULL).
    let start = unsafe { _Unwind_FindEnclosingFunction(pc as *mut std::ffi::c_void) } as usize;
    (start != 0 && start <= pc).then_some(start)
}

/// Hard limit on frames: far beyond what R's C stack limit allows.
pub(crate) const MAX_FRAMES: usize = 1 << 20;

/// Walks the stack with `backend`. `frames` is reused as the buffer.
fn raw_walk(backend: Backend, frames: &mut Vec<RawFrame>, want_start: bool) -> StackEnd {
    let mut capacity = frames.capacity().max(512);
    loop {
        frames.clear();
        let end = match backend {
            // A panic in the cached unwinder (it parses tables from memory)
            // becomes a hand-over to libgcc, not a failed capture.
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Backend::Cfi => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cfi::walk(frames, capacity, want_start)
            }))
            .unwrap_or_else(|_| StackEnd::Failed(cfi::UNSUPPORTED.into())),
            #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
            Backend::Cfi => StackEnd::Failed("the cfi backend is not compiled in".into()),
            #[cfg(winch_libunwind)]
            Backend::Libunwind => libunwind::walk(frames, capacity, want_start),
            #[cfg(not(winch_libunwind))]
            Backend::Libunwind => StackEnd::Failed("libunwind is not compiled in".into()),
            Backend::Backtrace => backtrace::walk(frames, capacity, want_start),
        };
        if end != StackEnd::Limit || capacity >= MAX_FRAMES {
            return end;
        }
        capacity = (capacity * 4).min(MAX_FRAMES);
    }
}

/// Captures the current thread's stack with `backend`, normalized.
#[inline(never)]
pub fn capture(backend: Backend) -> crate::error::Result<Stack> {
    use crate::error::Error;
    if !compiled_in(backend) {
        return Err(Error::Unavailable(format!("the {} backend is not part of this build", backend.name())));
    }
    let kind = calibration(backend).ok_or_else(|| {
        Error::Unavailable(format!("the {} backend failed its calibration on this platform", backend.name()))
    })?;
    // The walk's buffer is kept between captures (a fresh one per capture
    // was a large allocation, often in pages the C library had just given
    // back to the system); a fresh one if another capture is using it.
    let walk = |raw: &mut Vec<RawFrame>| {
        let end = raw_walk(backend, raw, false);
        let out = (!(backend == Backend::Cfi && is_unsupported(&end))).then(|| (normalize(raw, kind), end));
        // Not kept after a very deep stack (a runaway recursion's).
        if raw.capacity() > KEPT_RAW_FRAMES {
            *raw = Vec::new();
        }
        out
    };
    let walked = match RAW_FRAMES.try_lock() {
        Ok(mut raw) => walk(&mut raw),
        Err(_) => walk(&mut Vec::new()),
    };
    match walked {
        Some((frames, end)) => Ok(Stack { backend, frames, end }),
        // A frame the cached unwinder does not model: libgcc does it all.
        None => capture(Backend::Backtrace),
    }
}

/// The most frames the kept buffer holds room for (128 KiB).
const KEPT_RAW_FRAMES: usize = 4096;

/// The buffer [`capture`] walks into, kept between captures (one thread's
/// at a time; a static, not a thread-local, whose destructor would keep
/// winch's library mapped after it is unloaded).
static RAW_FRAMES: std::sync::Mutex<Vec<RawFrame>> = std::sync::Mutex::new(Vec::new());

fn is_unsupported(end: &StackEnd) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if let StackEnd::Failed(why) = end {
        return why == cfi::UNSUPPORTED;
    }
    let _ = end;
    false
}

/// Converts backend stack values to frame low ends.
pub(crate) fn normalize(raw: &[RawFrame], kind: StackValue) -> Vec<Frame> {
    raw.iter()
        .enumerate()
        .map(|(i, f)| Frame {
            ip: f.ip,
            lo: match kind {
                StackValue::Sp => f.stack,
                StackValue::Cfa if i > 0 => raw[i - 1].stack,
                StackValue::Cfa => 0,
            },
            // The innermost frame, a signal trampoline, and the frame the
            // signal interrupted hold exact instruction addresses.
            exact_ip: i == 0 || f.signal || (i > 0 && raw[i - 1].signal),
        })
        .collect()
}

/// How `backend` reports stack values, determined once by capturing from a
/// function with a local variable at a known address.
pub(crate) fn calibration(backend: Backend) -> Option<StackValue> {
    static CFI: OnceLock<Option<StackValue>> = OnceLock::new();
    static LIBUNWIND: OnceLock<Option<StackValue>> = OnceLock::new();
    static BACKTRACE: OnceLock<Option<StackValue>> = OnceLock::new();
    if !compiled_in(backend) {
        return None;
    }
    let cell = match backend {
        Backend::Cfi => &CFI,
        Backend::Libunwind => &LIBUNWIND,
        Backend::Backtrace => &BACKTRACE,
    };
    *cell.get_or_init(|| calibrate(backend))
}

#[inline(never)]
fn calibrate(backend: Backend) -> Option<StackValue> {
    let marker = [0u64; 8];
    let marker_addr = std::hint::black_box(&marker) as *const _ as usize;
    let mut raw = Vec::with_capacity(512);
    raw_walk(backend, &mut raw, true);
    std::hint::black_box(&marker);
    let me = calibrate as fn(Backend) -> Option<StackValue> as usize;
    let c = raw.iter().position(|f| f.start == me)?;
    classify(&raw, c, marker_addr)
}

/// Given that frame `c` owns the local at `addr`, which stack-value meaning is
/// consistent with the reported values?
pub(crate) fn classify(raw: &[RawFrame], c: usize, addr: usize) -> Option<StackValue> {
    let v = |i: usize| raw.get(i).map(|f| f.stack);
    if let (Some(lo), Some(hi)) = (v(c), v(c + 1)) {
        if lo <= addr && addr < hi {
            return Some(StackValue::Sp);
        }
    }
    if c > 0 {
        if let (Some(lo), Some(hi)) = (v(c - 1), v(c)) {
            if lo <= addr && addr < hi {
                return Some(StackValue::Cfa);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(stack: &[usize]) -> Vec<RawFrame> {
        stack.iter().map(|&s| RawFrame { ip: 1, stack: s, ..Default::default() }).collect()
    }

    #[test]
    fn classify_sp_and_cfa() {
        // Frames with low ends 100, 200, 300, 400; a local at 250 lives in frame 1.
        assert_eq!(classify(&raw(&[100, 200, 300, 400]), 1, 250), Some(StackValue::Sp));
        // The same frames reported as CFAs (high ends): 200, 300, 400, 500.
        assert_eq!(classify(&raw(&[200, 300, 400, 500]), 1, 250), Some(StackValue::Cfa));
        assert_eq!(classify(&raw(&[200, 300]), 1, 999), None);
    }

    #[test]
    fn frames_around_a_signal_keep_exact_addresses() {
        // Frame 1 is a signal trampoline; frame 2 was interrupted by the
        // signal, so its address is the faulting instruction, not a return
        // address: it must not be looked up at ip - 1.
        let mut r = raw(&[100, 200, 300, 400]);
        r[1].signal = true;
        let f = normalize(&r, StackValue::Sp);
        assert_eq!(f.iter().map(|f| f.exact_ip).collect::<Vec<_>>(), vec![true, true, true, false]);
    }

    #[test]
    fn normalize_cfa_shifts_by_one() {
        let f = normalize(&raw(&[200, 300, 400]), StackValue::Cfa);
        assert_eq!(f.iter().map(|f| f.lo).collect::<Vec<_>>(), vec![0, 200, 300]);
        assert!(f[0].exact_ip && !f[1].exact_ip);
    }

    #[test]
    fn every_compiled_backend_calibrates() {
        for b in Backend::ALL {
            if compiled_in(b) {
                assert!(calibration(b).is_some(), "{} failed calibration", b.name());
            }
        }
        // Which meaning each backend has is platform-specific (libgcc's
        // `_Unwind_GetCFA` reports the frame's SP on x86_64 Linux); that is
        // exactly why it is measured rather than assumed.
    }

    #[inline(never)]
    fn owner_of_local(backend: Backend) -> (usize, Stack) {
        let local = [7u64; 4];
        let addr = std::hint::black_box(&local) as *const _ as usize;
        let stack = capture(backend).unwrap();
        std::hint::black_box(&local);
        (addr, stack)
    }

    #[test]
    fn captures_are_ordered_and_locals_have_owners() {
        for b in Backend::ALL.into_iter().filter(|b| b.is_available()) {
            let (addr, stack) = owner_of_local(b);
            assert!(stack.frames.len() > 3, "{}: too few frames", b.name());
            assert_eq!(stack.end, StackEnd::Outermost);
            let lo: Vec<usize> = stack.frames.iter().skip(1).map(|f| f.lo).collect();
            assert!(lo.windows(2).all(|w| w[0] <= w[1]), "{}: not ordered", b.name());
            let owner = (1..stack.frames.len() - 1)
                .find(|&i| stack.frames[i].lo <= addr && addr < stack.frames[i + 1].lo);
            assert!(owner.is_some(), "{}: local not inside any frame", b.name());
        }
    }

    #[test]
    fn backends_agree_on_return_addresses() {
        // The outer frames (below the capture machinery) must be identical.
        let reference = capture(Backend::Backtrace).unwrap();
        let tail = |s: &Stack| s.frames.iter().rev().take(4).map(|f| f.ip).collect::<Vec<_>>();
        for b in [Backend::Cfi, Backend::Libunwind].into_iter().filter(|b| b.is_available()) {
            let s = capture(b).unwrap();
            assert_eq!(s.backend, b, "{} fell back", b.name());
            assert_eq!(tail(&s), tail(&reference), "{}", b.name());
        }
    }

    #[inline(never)]
    fn recurse(n: usize, out: &mut Vec<Stack>) -> usize {
        if n == 0 {
            for b in Backend::ALL.into_iter().filter(|b| b.is_available()) {
                let s = capture(b).unwrap();
                assert_eq!(s.backend, b, "{} fell back", b.name());
                out.push(s);
            }
            return 0;
        }
        let r = recurse(n - 1, out);
        std::hint::black_box(r) + 1
    }

    #[test]
    fn deep_stacks_agree_frame_by_frame() {
        let mut stacks = Vec::new();
        recurse(200, &mut stacks);
        let reference = stacks.iter().find(|s| s.backend == Backend::Backtrace).unwrap();
        // Skip each walker's own innermost frames; compare the rest.
        let outer = |s: &Stack| s.frames.iter().rev().take(205).map(|f| (f.ip, f.lo)).collect::<Vec<_>>();
        for s in &stacks {
            assert!(s.frames.len() > 200);
            assert_eq!(s.end, StackEnd::Outermost, "{}", s.backend.name());
            let (a, b) = (outer(s), outer(reference));
            assert_eq!(a.iter().map(|x| x.0).collect::<Vec<_>>(), b.iter().map(|x| x.0).collect::<Vec<_>>());
            // Frame low ends agree too (all backends normalized to SP).
            assert_eq!(a[..a.len() - 1], b[..b.len() - 1], "{}", s.backend.name());
        }
    }
}
