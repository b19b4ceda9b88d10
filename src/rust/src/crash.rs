//! The crash report as R sees it: turning it on and off, and what it
//! covers (see winch_core::crash).

use crate::args::Arg;
use crate::rapi;
use crate::rstate;
use crate::value::RValue;
use winch_core::crash::{self, CStack};
use winch_core::error::{Error, Result};

fn status_value(s: crash::Status) -> RValue {
    let name = |sig: i32| crash::signal_name(sig).0.to_string();
    RValue::List(vec![
        ("supported", crash::supported().into()),
        ("enabled", s.enabled.into()),
        ("signals", RValue::from(s.signals.iter().map(|&g| name(g)).collect::<Vec<_>>())),
        ("skipped", RValue::from(s.skipped.iter().map(|(g, _)| name(*g)).collect::<Vec<_>>())),
        ("reasons", RValue::from(s.skipped.into_iter().map(|(_, why)| why).collect::<Vec<_>>())),
    ])
}

/// Turns the report on or off; returns what it covers now.
pub fn rs_crash_set(enable: Arg) -> Result<RValue> {
    if !rstate::on_main_thread() {
        return Err(Error::WrongThread);
    }
    if !enable.flag()? {
        return Ok(status_value(crash::disable()?));
    }
    if !crash::supported() {
        return Err(Error::Unavailable("the crash report needs x86_64 Linux".into()));
    }
    let r = rstate::facts()?;
    // SAFETY: reading exported variables of libR (set at start-up), on R's
    // main thread.
    let cstack =
        unsafe { CStack { start: rapi::R_CStackStart, limit: rapi::R_CStackLimit, dir: rapi::R_CStackDir } };
    let facts = crash::HandlerSetup::from_r(r, cstack);
    Ok(status_value(crash::enable(facts)?))
}

/// What the report covers now.
pub fn rs_crash_status() -> Result<RValue> {
    Ok(status_value(crash::status()))
}

/// After each top-level expression: the report's handlers back where R took
/// them (C stack overflow recovery), tables refreshed if modules changed.
pub fn rs_crash_rearm() -> Result<RValue> {
    if rstate::on_main_thread() {
        crash::rearm();
    }
    Ok(crash::status().enabled.into())
}

/// The actions installed now for the report's signals, as the kernel holds
/// them: names, then handler, flags, restorer and mask (hex).
pub fn rs_crash_handlers() -> Result<RValue> {
    let h = crash::handlers();
    type Action = (i32, usize, u64, usize, u64);
    let hex = |f: &dyn Fn(&Action) -> u64| {
        RValue::from(h.iter().map(|x| format!("{:016x}", f(x))).collect::<Vec<_>>())
    };
    Ok(RValue::List(vec![
        ("signal", RValue::from(h.iter().map(|x| crash::signal_name(x.0).0.to_string()).collect::<Vec<_>>())),
        ("handler", hex(&|x| x.1 as u64)),
        ("flags", hex(&|x| x.2)),
        ("restorer", hex(&|x| x.3 as u64)),
        ("mask", hex(&|x| x.4)),
    ]))
}
