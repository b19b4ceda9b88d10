//! How every `.Call` entry point runs: the work in Rust (a panic becomes an
//! internal error), then the result, or `list(error = <message>, class =
//! <condition class>)`, made in R under `R_ToplevelExec` (`value.rs`). If R
//! cannot allocate even that, the entry point returns `NULL`; the R
//! wrappers (`check_result()`) turn errors and `NULL` into classed R
//! conditions. No R error is raised from Rust frames and no panic reaches R.

use crate::rapi::{self, Sexp};
use crate::rstate;
use crate::value::{self, RValue};
use winch_core::error::{Error, Result};

/// Runs `f` and returns its result as an R object.
pub fn run(f: impl FnOnce() -> Result<RValue>) -> Sexp {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Error::Internal(rstate::take_panic_message().unwrap_or_else(|| "panic".into())))
    });
    let value = result.unwrap_or_else(|e| error_value(&e));
    // SAFETY: reading R's constant NULL.
    value::to_r(&value).unwrap_or(unsafe { rapi::R_NilValue })
}

/// The R form of an error.
fn error_value(e: &Error) -> RValue {
    RValue::List(vec![("error", e.to_string().into()), ("class", e.class().to_string().into())])
}
