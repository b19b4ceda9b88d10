//! What winch learns about the running R by watching it, once per session
//! (R's calibration in `R/calibrate.R` runs the probes): which native
//! functions of R run its AST loops, where R's byte-code interpreter loop
//! keeps its program counter, and R's byte-code instructions. The profiler
//! names loops with these; without them, loops are labelled generically.
//!
//! What is seen on the stack while a probe runs (the frames holding R's
//! records) is read by the caller, which captures the stack, and given to
//! the functions here: this module keeps and checks what was learnt.

use super::bcode::OpTable;
use super::Facts;
use crate::error::{Error, Result};
use crate::memory::Objects;
use crate::unwind::walk::Snapshot;
use std::sync::{Mutex, OnceLock};

/// The function starts of R's AST loops (`do_for`, `do_while`,
/// `do_repeat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LoopStarts {
    pub(crate) for_: usize,
    pub(crate) while_: usize,
    pub(crate) repeat: usize,
}

/// An AST loop's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    For,
    While,
    Repeat,
}

/// Loop functions seen so far (for, while, repeat), and all three once they
/// are known and distinct.
static SEEN: Mutex<[usize; 3]> = Mutex::new([0; 3]);
static LOOPS: Mutex<Option<LoopStarts>> = Mutex::new(None);
/// Interpreter loop frames: (function start, bytes below the CFA of the
/// program-counter slot), up to two.
static BC_FRAMES: Mutex<Option<[(usize, usize); 2]>> = Mutex::new(None);
/// R's instructions (fixed for the life of the process: learnt once).
static OPS: OnceLock<OpTable> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Learns which native function of R runs an AST loop of `kind` from
/// `owner_ip`, a return address in the native frame that holds the record
/// of a loop of that kind running now (the caller finds it on the stack).
/// Once all three are known and distinct, samples name AST loops by kind.
pub(crate) fn learn_loop(facts: &Facts, kind: LoopKind, owner_ip: usize) -> Result<()> {
    let snap = Snapshot::take(facts.interpreter_addr);
    let start = snap
        .function_start(owner_ip - 1)
        .ok_or_else(|| Error::Inconsistent("a loop's frame has no unwind information".into()))?;
    let mut seen = lock(&SEEN);
    seen[kind as usize] = start;
    let [f, w, r] = *seen;
    if f != 0 && w != 0 && r != 0 {
        if f == w || f == r || w == r {
            return Err(Error::Inconsistent("R's loops did not run in distinct functions".into()));
        }
        *lock(&LOOPS) = Some(LoopStarts { for_: f, while_: w, repeat: r });
    }
    Ok(())
}

/// R's instructions as the calibration shows them: a body whose code is
/// every opcode in order, the operand counts, and the opcodes of `GOTO` and
/// `STEPFOR`.
pub struct Opcodes {
    pub body: usize,
    pub argc: Vec<i32>,
    pub goto: i32,
    pub stepfor: i32,
}

/// Learns R's instructions from `opcodes` the first time they are given.
pub(crate) fn learn_ops(opcodes: Option<Opcodes>) -> Result<()> {
    if let (None, Some(o)) = (OPS.get(), opcodes) {
        let table = OpTable::learn(&Objects, o.body, &o.argc, o.goto, o.stepfor)
            .ok_or_else(|| Error::Inconsistent("R's byte code is not laid out as winch expects".into()))?;
        let _ = OPS.set(table);
    }
    Ok(())
}

/// Learns where R's byte-code interpreter loop keeps its program counter
/// from `seen`: for each record made while byte code ran whose loop slot
/// is on the C stack, the start of the native function holding the slot
/// and how far below that frame's CFA the slot is (the caller reads them
/// from the stack, called from byte code).
pub(crate) fn learn_bc_frames(seen: &[(usize, usize)]) -> Result<()> {
    *lock(&BC_FRAMES) = Some(interpreter_frames(seen)?);
    Ok(())
}

/// The distinct interpreter loop frames among `seen` (function start, slot
/// offset): at most two, each keeping its counter at one place.
fn interpreter_frames(seen: &[(usize, usize)]) -> Result<[(usize, usize); 2]> {
    let mut learnt: Vec<(usize, usize)> = Vec::new();
    for &(start, offset) in seen {
        match learnt.iter().find(|(s, _)| *s == start) {
            Some(&(_, o)) if o != offset => {
                return Err(Error::Inconsistent(
                    "R's interpreter loop keeps its counter at different places".into(),
                ))
            }
            Some(_) => {}
            None => learnt.push((start, offset)),
        }
    }
    if learnt.is_empty() || learnt.len() > 2 {
        return Err(Error::Inconsistent("R's interpreter loop frames could not be told".into()));
    }
    let mut frames = [(0, 0); 2];
    frames[..learnt.len()].copy_from_slice(&learnt);
    Ok(frames)
}

/// The AST loops' functions, if learnt.
pub(crate) fn loops() -> Option<LoopStarts> {
    *lock(&LOOPS)
}

/// The interpreter loop frames, if learnt.
pub(crate) fn bc_frames() -> Option<[(usize, usize); 2]> {
    *lock(&BC_FRAMES)
}

/// R's instructions, if learnt.
pub(crate) fn ops() -> Option<&'static OpTable> {
    OPS.get()
}

/// Whether R's instructions were learnt.
pub fn ops_known() -> bool {
    ops().is_some()
}

/// Whether loops can be named by kind (everything learnt).
pub fn loops_known() -> bool {
    loops().is_some() && bc_frames().is_some() && ops().is_some()
}

/// What this session learnt, for another process running the same build
/// of R (the same build-id) loaded `delta` bytes further on (wrapping):
/// the functions and the instructions' words are addresses in R's code,
/// and the slots' offsets are the same. Nothing that is not learnt here.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Moved {
    pub loops: Option<LoopStarts>,
    pub bc_frames: Option<[(usize, usize); 2]>,
    pub ops: Option<&'static OpTable>,
}

/// Instruction tables moved for other processes, by `delta` (kept for the
/// session, as this process's own is: a few, one per distinct address R
/// was loaded at in the processes recorded).
static MOVED_OPS: Mutex<Vec<(usize, &'static OpTable)>> = Mutex::new(Vec::new());
const MAX_MOVED: usize = 32;

/// See [`Moved`].
pub(crate) fn moved(delta: usize) -> Moved {
    let shift = |a: usize| if a == 0 { 0 } else { a.wrapping_add(delta) };
    let loops =
        loops().map(|l| LoopStarts { for_: shift(l.for_), while_: shift(l.while_), repeat: shift(l.repeat) });
    let bc_frames = bc_frames().map(|f| f.map(|(start, offset)| (shift(start), offset)));
    let ops = ops().and_then(|own| {
        if delta == 0 {
            return Some(own);
        }
        let mut cache = lock(&MOVED_OPS);
        if let Some(&(_, t)) = cache.iter().find(|(d, _)| *d == delta) {
            return Some(t);
        }
        if cache.len() >= MAX_MOVED {
            return None; // (no more leaked: byte code's loops go unnamed)
        }
        let t: &'static OpTable = Box::leak(Box::new(own.moved(delta)));
        cache.push((delta, t));
        Some(t)
    });
    Moved { loops, bc_frames, ops }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_frames_are_told_apart() {
        assert_eq!(interpreter_frames(&[(10, 8), (20, 16), (10, 8)]).unwrap(), [(10, 8), (20, 16)]);
        assert_eq!(interpreter_frames(&[(10, 8)]).unwrap(), [(10, 8), (0, 0)]);
        assert!(interpreter_frames(&[]).is_err());
        assert!(interpreter_frames(&[(10, 8), (10, 16)])
            .unwrap_err()
            .to_string()
            .contains("different places"));
        assert!(interpreter_frames(&[(1, 8), (2, 8), (3, 8)]).is_err());
    }
}
