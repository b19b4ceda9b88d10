//! Throw capture as R sees it: turning it on and off, the last throw as a
//! table, and the branch a captured throw adds to a joint view.

use crate::args::Arg;
use crate::frames::{FrameTable, ThrowInfo};
use crate::rstate;
use crate::value::RValue;
use winch_core::error::{Error, Result};
use winch_core::joint::Joint;
use winch_core::throws;
use winch_core::throws::shown::{self, Thrown};

fn require_main_thread() -> Result<()> {
    if rstate::on_main_thread() {
        Ok(())
    } else {
        Err(Error::WrongThread)
    }
}

fn status_value(installed: bool, slots: usize, modules: usize) -> RValue {
    RValue::List(vec![
        ("supported", throws::supported().into()),
        ("installed", installed.into()),
        ("slots", RValue::from(slots as i32)),
        ("modules", RValue::from(modules as i32)),
    ])
}

/// Turns capture on or off; returns what it covers now.
pub fn rs_throws_set(enable: Arg) -> Result<RValue> {
    require_main_thread()?;
    if !enable.flag()? {
        throws::uninstall()?;
        return Ok(status_value(false, 0, 0));
    }
    if !throws::supported() {
        return Err(Error::Unavailable("capturing throws needs x86_64 Linux".into()));
    }
    let facts = throws::HookSetup::from_r(rstate::facts()?);
    let s = throws::install(facts)?;
    Ok(status_value(true, s.slots, s.modules))
}

/// Whether capture is on, and what it covers.
pub fn rs_throws_status() -> Result<RValue> {
    let installed = throws::installed();
    let s = if installed { throws::status() } else { throws::Status::default() };
    Ok(status_value(installed, s.slots, s.modules))
}

/// After each top-level expression: a new epoch (earlier throws are never
/// matched again), a scan for modules loaded meanwhile by other means
/// than R's own `dlopen`, and the rows of dead traces spared by their
/// finalizer given it back (see `lazy_columns`).
pub fn rs_throws_tick() -> Result<RValue> {
    require_main_thread()?;
    // (R's task callback: a top-level call ended, no finalizer runs.)
    crate::lazy_columns::settle();
    throws::next_epoch();
    if throws::installed() {
        throws::rescan_if_changed();
    }
    Ok(throws::installed().into())
}

/// The R attributes saying what was thrown.
fn push_throw_attrs(table: &mut FrameTable, t: &Thrown) {
    table.attrs.push((c"kind", RValue::from(t.kind.map(|k| k.name().to_string()))));
    table.attrs.push((c"type", RValue::from(t.type_name.clone())));
    table.attrs.push((c"location", RValue::from(t.location.clone())));
    table.attrs.push((c"rethrown", RValue::from(t.rethrows as i32)));
}

/// The last captured throw, innermost frame first, as `winch_trace_back()`
/// shows frames (R's own included).
pub fn rs_last_throw() -> Result<RValue> {
    require_main_thread()?;
    let s = shown::last_throw(rstate::known_modules);
    let mut table = FrameTable::new(&s.trace, &s.rows, s.resolved.clone(), &s.classes, None);
    push_throw_attrs(&mut table, &s.thrown);
    Ok(RValue::Built(Box::new(table)))
}

/// The rows a captured throw adds to a joint view, and where.
pub struct Branch {
    /// The native frame (index into the joint capture's trace) that caught
    /// the exception.
    pub catcher: usize,
    /// Rows, outermost first: the catching frame as it was at the throw, then
    /// the frames it had called, down to the thrower.
    pub table: FrameTable,
    /// What was thrown.
    pub info: ThrowInfo,
}

/// The branch of the throw still being handled in `j`'s stack, if any (see
/// `winch_core::throws::shown::branch`).
pub fn branch(j: &Joint) -> Option<Branch> {
    let b = shown::branch(rstate::facts().ok()?, j)?;
    let s = &b.shown;
    // Each frame's inlined calls outermost first too.
    let mut table = FrameTable::in_order(&s.trace, &s.rows, s.resolved.clone(), &s.classes, None, true);
    for row in table.rows.rows_mut() {
        row.at_throw = true;
        row.r_frame = b.parent;
        row.approximate = b.approximate;
    }
    table.joint = true;
    let info = ThrowInfo {
        kind: s.thrown.kind.map(|k| k.name().to_string()),
        type_name: s.thrown.type_name.clone(),
        location: s.thrown.location.clone(),
    };
    Some(Branch { catcher: b.catcher, table, info })
}
