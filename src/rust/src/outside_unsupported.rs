//! winch from outside reads x86_64 Linux processes only: elsewhere its
//! entry points say so.

use crate::args::Arg;
use crate::value::RValue;
use winch_core::error::{Error, Result};

fn unavailable() -> Result<RValue> {
    Err(Error::Unavailable("reading another process is supported on x86_64 Linux only".into()))
}

pub fn rs_dump(_pid: Arg, _libr: Arg) -> Result<RValue> {
    unavailable()
}
pub fn rs_dump_core(_path: Arg, _exe: Arg, _libr: Arg) -> Result<RValue> {
    unavailable()
}
pub fn rs_record_start(
    _pid: Arg,
    _interval: Arg,
    _threads: Arg,
    _idle: Arg,
    _loops: Arg,
    _lines: Arg,
    _children: Arg,
) -> Result<RValue> {
    unavailable()
}
pub fn rs_record_tick() -> Result<RValue> {
    unavailable()
}
pub fn rs_record_stop() -> Result<RValue> {
    unavailable()
}
pub fn rs_record_discard() -> Result<RValue> {
    Ok(false.into())
}

pub fn rs_descendants(_pid: Arg) -> Result<RValue> {
    unavailable()
}

pub fn rs_target_usage(_pid: Arg) -> Result<RValue> {
    unavailable()
}
