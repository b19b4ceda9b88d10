//! The profiler's entry points where the sampler does not exist (it needs
//! x86_64 Linux): nothing runs, and starting says why.

use crate::args::Arg;
use crate::value::RValue;
use crate::ProfileStartArgs;
use winch_core::error::{Error, Result};

fn unavailable() -> Result<RValue> {
    Err(Error::Unavailable("the profiler needs x86_64 Linux".into()))
}

pub fn rs_profile_start(_args: ProfileStartArgs) -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_active() -> Result<RValue> {
    Ok(false.into())
}

pub fn rs_profile_stop() -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_learn_loop(_kind: Arg) -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_learn_bc(_opcodes: Arg) -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_loops_known() -> Result<RValue> {
    Ok(false.into())
}

pub fn rs_profile_sample_cost(_n: Arg, _thrash: Arg) -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_write(_parts: Arg, _path: Arg, _format: Arg, _lines: Arg) -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_check(_parts: Arg) -> Result<RValue> {
    unavailable()
}

pub fn rs_profile_discard() -> Result<RValue> {
    Ok(false.into())
}
