// Rust test library (plain rustc, no dependencies): a panic three calls
// below the entry point, caught there with catch_unwind; the entry point
// then raises an R error, as extendr's wrappers do.
use std::os::raw::{c_char, c_int, c_void};

type SEXP = *mut c_void;

extern "C" {
    fn Rf_error(fmt: *const c_char, ...) -> !;
    fn Rf_asInteger(x: SEXP) -> c_int;
    fn Rf_ScalarInteger(x: c_int) -> SEXP;
}

pub mod deep {
    #[inline(never)]
    pub fn level3(x: i32) -> i32 {
        if x > 0 {
            panic!("panicked three calls deep"); // @line:panic_site
        }
        x
    }

    #[inline(never)]
    pub fn level2(x: i32) -> i32 {
        level3(x) + 1
    }

    #[inline(never)]
    pub fn level1(x: i32) -> i32 {
        level2(x) + 1
    }
}

/// Raises the R error; nothing with a destructor is alive in this frame or
/// its caller when R jumps out.
#[inline(never)]
fn raise(msg: &[u8; 128]) -> ! {
    unsafe { Rf_error(b"caught a panic: %s\0".as_ptr() as *const c_char, msg.as_ptr()) }
}

#[no_mangle]
pub extern "C" fn rust_panic_caught(x: SEXP) -> SEXP {
    // The default hook would print the panic to stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let value = unsafe { Rf_asInteger(x) };
    let mut msg = [0u8; 128];
    let caught = match std::panic::catch_unwind(|| deep::level1(value)) {
        Ok(v) => Some(v),
        Err(payload) => {
            let text = payload.downcast_ref::<&str>().copied().unwrap_or("a panic");
            let n = text.len().min(msg.len() - 1);
            msg[..n].copy_from_slice(&text.as_bytes()[..n]);
            None
        }
    };
    let _ = std::panic::take_hook();
    match caught {
        Some(v) => unsafe { Rf_ScalarInteger(v) },
        None => raise(&msg),
    }
}
