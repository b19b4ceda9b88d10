// Rust test library (compiled with plain rustc, no dependencies): a Rust
// function in the middle of a round trip, for demangling and DWARF lines.
#![allow(non_camel_case_types)]
use std::os::raw::c_void;

type SEXP = *mut c_void;

extern "C" {
    fn Rf_lang1(f: SEXP) -> SEXP;
    fn Rf_protect(x: SEXP) -> SEXP;
    fn Rf_unprotect(n: i32);
    fn Rf_eval(e: SEXP, env: SEXP) -> SEXP;
}

pub mod nested {
    #[inline(never)]
    pub fn call_back(fun: super::SEXP, env: super::SEXP) -> super::SEXP {
        unsafe {
            let call = super::Rf_protect(super::Rf_lang1(fun));
            let out = super::Rf_eval(call, env); // @line:rust_call
            super::Rf_unprotect(1);
            out
        }
    }
}

#[no_mangle]
pub extern "C" fn rust_call(fun: SEXP, env: SEXP) -> SEXP {
    nested::call_back(fun, env)
}
