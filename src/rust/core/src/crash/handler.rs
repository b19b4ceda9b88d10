//! The crash report's signal handler (x86_64 Linux), and installing it.
//!
//! Prepared outside the handler, on R's main thread: a snapshot of the
//! loaded modules with their unwind tables (`unwind::walk`, the profiler's
//! signal-safe walker) and a copy of every module's symbol table, replaced
//! when libraries load; a buffer for frames and contexts; an alternate
//! signal stack if the thread has none. The handler reads memory (R's
//! objects through `process_vm_readv`, so a damaged pointer cannot fault),
//! formats into fixed buffers and calls `write(2)`; then it gives the
//! signal back to the handler it replaced:
//!
//! * a hardware fault (`si_code > 0`): the previous handler is restored and
//!   the handler returns; the instruction faults again and the previous
//!   handler (R's) runs with the genuine `siginfo` (R checks the address to
//!   recognise a C stack overflow);
//! * `SIGABRT`, or a signal sent by `kill()`/`raise()`: the previous handler
//!   is restored and the signal sent again to this thread (`tgkill`).
//!
//! A C stack overflow as R recognises it gets no report (R recovers from
//! it). R's handler takes `SIGSEGV` back then; [`rearm`] (run after each
//! top-level expression) installs the report again. Only handlers of R's
//! own library, the default action or "ignore" are replaced: a handler of
//! another library (a JVM loaded by rJava uses `SIGSEGV` internally) is left
//! alone and its signal is not reported.

use super::report::{self, Header, Out};
use super::signals::{
    ensure_alt_stack, errno, kernel_get, kernel_set, restore_alt_stack, set_errno, write_all, KernelAction,
};
use super::{CStack, HandlerSetup, Status, SIGNALS};
use crate::error::{Error, Result};
use crate::memory::{Memory, Own};
use crate::modules::{self, ModuleMap};
use crate::published::Published;
use crate::r::heap as rheap;
use crate::r::layout::{CTXT_BUILTIN, CTXT_FUNCTION};
use crate::r::sexp;
use crate::symbols::SymbolTable;
use crate::unwind::walk::{Frame, Snapshot};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

/// Frames walked at most: [`report::MAX_NATIVE`] are shown, the others
/// counted (a deep recursion is counted up to this bound).
const WALK: usize = 4096;
/// R contexts read at most.
const CONTEXTS: usize = 4 * report::MAX_R;

/// The loaded modules with their unwind and symbol tables.
struct Prepared {
    snap: Snapshot,
    /// Per module of `snap.map`.
    names: Vec<SymbolTable>,
    /// R's main thread's stack.
    stack: (usize, usize),
}

/// The handler's scratch memory (one user at a time: see `BUSY`).
struct Scratch {
    frames: [Frame; WALK],
    ctx_addr: [usize; CONTEXTS],
    ctx_call: [usize; CONTEXTS],
    owners: [usize; CONTEXTS],
    sps: [usize; WALK],
    ips: [usize; WALK],
}

struct Cell<T>(UnsafeCell<T>);
// SAFETY: each cell's rule is stated where it is declared; they are never
// touched by two threads at once.
unsafe impl<T> Sync for Cell<T> {}

/// Written on R's main thread before the report's handler is installed for
/// a signal (and not while it is); read by the handler.
static PREVIOUS: [Cell<Option<KernelAction>>; 5] = [const { Cell(UnsafeCell::new(None)) }; 5];
/// Whether the report's handler is installed for each signal.
static OURS: [AtomicBool; 5] = [const { AtomicBool::new(false) }; 5];
/// Whether the report is wanted (rearming puts back what R took).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Set while a report is written: a second fault (inside the report, or in
/// another thread at the same time) gets no report and is passed on at once.
static BUSY: AtomicBool = AtomicBool::new(false);
/// The setup (null while off) and the tables (none while off).
static SETUP: AtomicPtr<HandlerSetup> = AtomicPtr::new(std::ptr::null_mut());
/// Tables replaced are freed at the next publish if no report is being
/// written then, else at the one after (or when the report is turned off).
static TABLES: Published<Prepared> = Published::new();
/// Used only by the holder of `BUSY`.
static SCRATCH: AtomicPtr<Cell<Scratch>> = AtomicPtr::new(std::ptr::null_mut());

/// The alternate stack made while the report is on, and the signals left
/// alone.
#[derive(Default)]
struct Kept {
    alt: Option<(usize, usize, libc::stack_t)>,
    skipped: Vec<(i32, String)>,
}
// SAFETY: the raw pointers in `alt` are an mmap'ed region owned here.
unsafe impl Send for Kept {}

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

fn kept() -> std::sync::MutexGuard<'static, Option<Kept>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

fn thread_id() -> usize {
    // SAFETY: pthread_self reads the thread pointer.
    unsafe { libc::pthread_self() as usize }
}

fn setup() -> Option<&'static HandlerSetup> {
    // SAFETY: a non-null SETUP is a leaked Box, never freed.
    unsafe { SETUP.load(Ordering::Acquire).as_ref() }
}

/// Builds the tables for the modules loaded now (allocates, reads files).
fn prepare(interpreter_addr: usize) -> Prepared {
    let snap = Snapshot::take(interpreter_addr);
    let map: &ModuleMap = &snap.map;
    let names = (0..map.modules().len())
        .map(|i| crate::symbolizer::with_global(|s| s.symbol_table(map, i)).unwrap_or_default())
        .collect();
    let stack = crate::stack::thread_stack_bounds().unwrap_or((0, 0));
    Prepared { snap, names, stack }
}

/// Publishes `p` (called with `KEPT` held: one publish at a time).
fn publish(p: Prepared) {
    let (generation, exact) = (p.snap.generation, p.snap.exact);
    // Both the publish's swap and the handler's `BUSY.swap` are SeqCst: a
    // handler that sets BUSY after the load below reads the new tables, so
    // the old ones are freed at once unless a handler is running now (then
    // they wait for the next publish or for the report to be turned off).
    TABLES.publish(p, generation, exact);
    if !BUSY.load(Ordering::SeqCst) {
        // SAFETY: no handler runs (BUSY is clear after the swap), and one
        // starting now reads the tables just published.
        unsafe { TABLES.free_retired() };
    }
}

/// The action installed for `sig` now, as the kernel holds it.
fn current(sig: i32) -> Option<KernelAction> {
    kernel_get(sig)
}

fn our_action() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is a valid value to fill in.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction =
        on_signal as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    // SA_NODEFER: a signal re-sent from the handler is delivered at once.
    a.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
    // Every other signal (a profiler's SIGPROF, SIGALRM, ...) waits until
    // the report is written; the five reported ones stay open, so that one
    // re-sent from the handler (or a fault inside it) is delivered at once.
    // SAFETY: sa_mask is a valid sigset_t to fill and edit.
    unsafe {
        libc::sigfillset(&mut a.sa_mask);
        for &sig in SIGNALS.iter() {
            libc::sigdelset(&mut a.sa_mask, sig);
        }
    }
    a
}

fn is_ours(a: &KernelAction) -> bool {
    a.handler == our_action().sa_sigaction
}

/// Whether the handler `a` may be replaced: the default action, "ignore",
/// or a handler in R's own library (or executable).
fn replaceable(a: &KernelAction, interpreter_addr: usize) -> std::result::Result<(), String> {
    let h = a.handler;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return Ok(());
    }
    let map = modules::current();
    let m = map.module_of(h);
    let libr = map.module_of(interpreter_addr);
    let in_r = m.is_some() && (m == libr || m.is_some_and(|i| crate::view::is_r_executable(map.module(i))));
    if in_r {
        Ok(())
    } else {
        let owner = m.map_or("an unknown module".to_string(), |i| map.module(i).basename().to_string());
        Err(format!("its handler belongs to {owner}, not to R"))
    }
}

/// Installs the report's handler for signal number `k` (an index into
/// SIGNALS) if the current one may be replaced.
fn take(k: usize, interpreter_addr: usize) -> std::result::Result<(), String> {
    let sig = SIGNALS[k];
    let cur = current(sig).ok_or_else(|| "its handler cannot be read".to_string())?;
    if is_ours(&cur) {
        OURS[k].store(true, Ordering::Release);
        return Ok(());
    }
    replaceable(&cur, interpreter_addr)?;
    // SAFETY: the report's handler is not installed for `sig` (checked
    // above), so no handler reads this cell now; this is the main thread.
    unsafe { *PREVIOUS[k].0.get() = Some(cur) };
    let ours = our_action();
    // SAFETY: installs a valid action.
    if unsafe { libc::sigaction(sig, &ours, std::ptr::null_mut()) } != 0 {
        return Err("sigaction failed".into());
    }
    OURS[k].store(true, Ordering::Release);
    Ok(())
}

/// Gives signal `k` back to the handler it had, if the report's is still
/// installed (a handler installed since by someone else stays).
fn give_back(k: usize) {
    let sig = SIGNALS[k];
    if let (Some(cur), true) = (current(sig), OURS[k].load(Ordering::Acquire)) {
        if is_ours(&cur) {
            // SAFETY: written before our handler was installed.
            if let Some(prev) = unsafe { *PREVIOUS[k].0.get() } {
                kernel_set(sig, &prev);
            }
        }
    }
    OURS[k].store(false, Ordering::Release);
}

/// Turns the report on (R's main thread).
pub fn enable(f: HandlerSetup) -> Result<Status> {
    if thread_id() != f.main_thread {
        return Err(Error::WrongThread);
    }
    let mut guard = kept();
    // Outside the handler: decide once whether process_vm_readv works.
    crate::memory::available();
    // The latest setup; earlier ones are leaked on purpose (a handler on
    // another thread may still read them; a few hundred bytes per enable).
    SETUP.store(Box::into_raw(Box::new(f)), Ordering::Release);
    if SCRATCH.load(Ordering::Acquire).is_null() {
        // SAFETY: all-zero bytes are valid for these plain arrays.
        let scratch: Box<Cell<Scratch>> = Box::new(Cell(UnsafeCell::new(unsafe { std::mem::zeroed() })));
        SCRATCH.store(Box::into_raw(scratch), Ordering::Release);
    }
    let first = guard.is_none();
    let kept = guard.get_or_insert_with(Kept::default);
    if first || TABLES.current().is_none() {
        publish(prepare(f.interpreter_addr));
        kept.alt = ensure_alt_stack();
    }
    ENABLED.store(true, Ordering::Release);
    kept.skipped.clear();
    crate::loadhook::pin_self();
    for (k, &sig) in SIGNALS.iter().enumerate() {
        if let Err(why) = take(k, f.interpreter_addr) {
            kept.skipped.push((sig, why));
        }
    }
    drop(guard);
    crate::loadhook::listen(crate::loadhook::CRASH, refresh);
    crate::loadhook::acquire(crate::loadhook::CRASH, f.interpreter_addr);
    Ok(status())
}

/// Turns the report off: every signal gets back the handler it had.
pub fn disable() -> Result<Status> {
    let Some(f) = setup() else { return Ok(status()) };
    if thread_id() != f.main_thread {
        return Err(Error::WrongThread);
    }
    let mut guard = kept();
    ENABLED.store(false, Ordering::Release);
    for k in 0..SIGNALS.len() {
        give_back(k);
    }
    if let Some(k) = guard.take() {
        if let Some(alt) = k.alt {
            restore_alt_stack(alt);
        }
        // SAFETY: no handler is installed now.
        unsafe { TABLES.clear() };
    }
    drop(guard);
    crate::loadhook::release(crate::loadhook::CRASH);
    Ok(status())
}

/// Rebuilds the tables for the modules loaded now (after a library was
/// loaded or unloaded). R's main thread.
pub fn refresh() {
    if !ENABLED.load(Ordering::Acquire) {
        return;
    }
    let Some(f) = setup() else { return };
    let guard = kept();
    if guard.is_some() {
        publish(prepare(f.interpreter_addr));
    }
}

/// After each top-level expression: installs the report again where R took
/// a signal back (after recovering from a C stack overflow), and refreshes
/// the tables if modules changed by other means than R's `dlopen`.
pub fn rearm() {
    if !ENABLED.load(Ordering::Acquire) {
        return;
    }
    let Some(f) = setup() else { return };
    if thread_id() != f.main_thread {
        return;
    }
    let stale = TABLES.current().is_none_or(|p| p.generation != modules::loader_generation());
    if stale {
        refresh();
        // The one way GOT hooks hear of it (see `got::hookset`).
        crate::got::hookset::modules_changed(&modules::current());
    }
    let mut guard = kept();
    let Some(kept) = guard.as_mut() else { return };
    kept.skipped.clear();
    for k in 0..SIGNALS.len() {
        if !OURS[k].load(Ordering::Acquire) || current(SIGNALS[k]).is_some_and(|a| !is_ours(&a)) {
            OURS[k].store(false, Ordering::Release);
            if let Err(why) = take(k, f.interpreter_addr) {
                kept.skipped.push((SIGNALS[k], why));
            }
        }
    }
}

/// What the report covers now.
pub fn status() -> Status {
    let enabled = ENABLED.load(Ordering::Acquire);
    let signals =
        (0..SIGNALS.len()).filter(|&k| OURS[k].load(Ordering::Acquire)).map(|k| SIGNALS[k]).collect();
    let skipped = kept().as_ref().map(|k| k.skipped.clone()).unwrap_or_default();
    Status { enabled, signals, skipped }
}

/// The actions installed now for the report's signals, as the kernel holds
/// them: (signal, handler, flags, restorer, mask), to check that turning
/// the report off restores them.
pub fn handlers() -> Vec<(i32, usize, u64, usize, u64)> {
    SIGNALS
        .iter()
        .map(|&s| current(s).map_or((s, 0, 0, 0, 0), |a| (s, a.handler, a.flags, a.restorer, a.mask)))
        .collect()
}

/// A word of a stack: in place inside R's main stack, else through the
/// kernel.
fn stack_word(stack: (usize, usize), addr: usize) -> Option<usize> {
    if !addr.is_multiple_of(8) {
        return None;
    }
    // SAFETY: R's main thread's stack (or empty), mapped while it runs.
    unsafe { crate::memory::stack_word(stack, addr) }.or_else(|| Own.word(addr))
}

/// R's C stack as R's variables say now (plain reads: safe in a handler).
fn live_cstack(f: &HandlerSetup) -> CStack {
    let [start, limit, dir] = f.cstack_vars;
    if start == 0 || limit == 0 || dir == 0 {
        return f.cstack;
    }
    // SAFETY: addresses of libR's variables (uintptr_t, uintptr_t, int),
    // mapped for as long as R runs.
    unsafe {
        CStack {
            start: std::ptr::read_volatile(start as *const usize),
            limit: std::ptr::read_volatile(limit as *const usize),
            dir: std::ptr::read_volatile(dir as *const i32),
        }
    }
}

/// The signal handler.
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let saved = errno();
    let Some(k) = SIGNALS.iter().position(|&s| s == sig) else { return };
    // SAFETY: the kernel passes a valid siginfo_t.
    let code = unsafe { (*info).si_code };
    let hardware = code > 0 && sig != libc::SIGABRT;
    if !BUSY.swap(true, Ordering::SeqCst) {
        let _ = std::panic::catch_unwind(|| {
            // SAFETY: as above; si_addr is valid for these signals.
            let addr = hardware.then(|| unsafe { (*info).si_addr() } as usize);
            let main = setup().is_some_and(|f| f.main_thread == thread_id());
            let overflow = main
                && sig == libc::SIGSEGV
                && addr
                    .is_some_and(|a| setup().is_some_and(|f| super::is_c_stack_overflow(a, live_cstack(f))));
            if !overflow {
                report(Header { signal: sig, address: addr, main_thread: main }, uc);
            }
        });
        BUSY.store(false, Ordering::Release);
    }
    // Back to the previous handler.
    // SAFETY: written before our handler was installed for this signal.
    let prev = unsafe { *PREVIOUS[k].0.get() };
    let back = prev.unwrap_or(KernelAction { handler: libc::SIG_DFL, ..KernelAction::default() });
    kernel_set(sig, &back);
    OURS[k].store(false, Ordering::Release);
    if !hardware {
        // SAFETY: sends the signal to this thread again; with SA_NODEFER it
        // is delivered now, to the handler just restored.
        unsafe {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::syscall(libc::SYS_gettid), sig);
        }
    }
    set_errno(saved);
}

/// Writes the report of the signal described by `header`, interrupting the
/// code whose registers are in `uc`.
fn report(header: Header, uc: *mut libc::c_void) {
    let mut out = Out::new(write_all);
    let p = TABLES.current().map(|e| &e.value);
    // SAFETY: non-null pointers here stay alive while the report is on.
    let (f, scratch) = unsafe { (setup(), SCRATCH.load(Ordering::Acquire).as_ref()) };
    let (Some(p), Some(f), Some(scratch), false) = (p, f, scratch, uc.is_null()) else {
        out.text("\n*** winch: a fatal signal, but the crash report is not prepared\n");
        out.flush();
        return;
    };
    // SAFETY: the holder of BUSY is the only user of the scratch memory.
    let s = unsafe { &mut *scratch.0.get() };
    // SAFETY: the kernel passes the interrupted context.
    let gregs = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    let regs = (
        gregs[libc::REG_RIP as usize] as usize,
        gregs[libc::REG_RSP as usize] as usize,
        gregs[libc::REG_RBP as usize] as usize,
    );
    let stack = if header.main_thread { p.stack } else { (0, 0) };
    let (n, end) = p.snap.walk(regs, |a| stack_word(stack, a), &mut s.frames);
    let stopped = match end {
        crate::unwind::walk::End::Stopped(why) => Some(why),
        _ => None,
    };
    let counted_all = end != crate::unwind::walk::End::Full;
    for (sp, fr) in s.sps.iter_mut().zip(&s.frames[..n]) {
        *sp = fr.sp;
    }
    // R's calls (main thread only): closure calls and builtins, innermost
    // first.
    let mut m = 0;
    if let (true, Some(chain)) = (header.main_thread, &f.chain) {
        for c in chain.read(&Own, 100_000).map_while(|c| c.ok()) {
            if m >= CONTEXTS {
                break;
            }
            if c.callflag & (CTXT_FUNCTION | CTXT_BUILTIN) != 0
                && sexp::type_of(&Own, c.call) == Some(sexp::LANGSXP)
            {
                s.ctx_addr[m] = c.addr;
                s.ctx_call[m] = c.call;
                m += 1;
            }
        }
    }
    crate::interleave::owners(&s.sps[..n], &s.ctx_addr[..m], p.stack.1, &mut s.owners[..m]);
    for (ip, fr) in s.ips.iter_mut().zip(&s.frames[..n]) {
        *ip = fr.ip;
    }
    let frames = &s.frames;
    let calls = &s.ctx_call;
    report::write(
        &mut out,
        header,
        report::NativeFrames { ips: &s.ips[..n], counted_all, stopped },
        |i, out| describe(p, &frames[i], i == 0, out),
        report::RCalls { owners: &s.owners[..m], counted_all: m < CONTEXTS },
        |k, out| {
            let mut buf = rheap::Buf::default();
            match sexp::car(&Own, calls[k]) {
                Some(fun) => rheap::label(&Own, &f.symbols, fun, &mut buf),
                None => buf.len = 0,
            }
            out.name(buf.as_bytes());
            out.text("()");
        },
    );
}

/// Writes a frame's module and function with the offset into it, or the
/// offset into the module where no symbol contains the address.
fn describe<W: FnMut(&[u8])>(p: &Prepared, fr: &Frame, first: bool, out: &mut Out<W>) {
    let probe = if first { fr.ip } else { fr.ip.wrapping_sub(1) };
    let Some(m) = p.snap.map.module_of(probe) else {
        out.text("?");
        return;
    };
    let module = p.snap.map.module(m);
    out.name(module.basename().as_bytes());
    out.text("  ");
    let rel = probe.wrapping_sub(module.bias) as u64;
    match p.names.get(m).and_then(|t| t.lookup(rel)) {
        Some(sym) => {
            out.name(sym.name.as_bytes());
            out.text(" + ");
            out.short_hex(fr.ip.wrapping_sub(module.bias).wrapping_sub(sym.start as usize));
        }
        None => crate::view::write_unnamed_label(None, fr.ip.wrapping_sub(module.bias), |b| out.name(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_stack_is_read_from_r_variables_when_a_signal_comes() {
        static mut START: usize = 0x7000_0000;
        static mut LIMIT: usize = 0x80_0000;
        static mut DIR: i32 = 1;
        let vars = [
            std::ptr::addr_of!(START) as usize,
            std::ptr::addr_of!(LIMIT) as usize,
            std::ptr::addr_of!(DIR) as usize,
        ];
        let given = CStack { start: 1, limit: 2, dir: -1 };
        let f = HandlerSetup { cstack: given, cstack_vars: vars, ..HandlerSetup::default() };
        assert_eq!(live_cstack(&f), CStack { start: 0x7000_0000, limit: 0x80_0000, dir: 1 });
        // Code that embeds R turns the check off later (limit -1): followed.
        // SAFETY: only this test uses these statics.
        unsafe { std::ptr::write_volatile(std::ptr::addr_of_mut!(LIMIT), usize::MAX) };
        assert_eq!(live_cstack(&f).limit, usize::MAX);
        // Without the variables' addresses: the values given when enabled.
        let f = HandlerSetup { cstack: given, ..HandlerSetup::default() };
        assert_eq!(live_cstack(&f), given);
    }
}
