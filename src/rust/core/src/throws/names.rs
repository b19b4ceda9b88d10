//! The names around a throw: which frames are the throw machinery, the
//! parts a compiler splits off a function, the C++ exception types that
//! carry an R condition, and demangled type names.

/// Whether a frame named `name` belongs to the throw machinery (C++'s
/// `__cxa_throw` and friends, the unwinder, Rust's panic runtime): such
/// frames at the inner end of a record are not shown.
pub fn is_throw_machinery(name: &str) -> bool {
    const EXACT: [&str; 9] = [
        "__cxa_throw",
        "__cxa_rethrow",
        "_Unwind_RaiseException",
        "_Unwind_Resume_or_Rethrow",
        "rust_panic",
        "__rust_start_panic",
        "rust_begin_unwind",
        "core::panicking::panic",
        "core::panicking::panic_fmt",
    ];
    const PREFIXES: [&str; 9] = [
        "std::rethrow_exception",
        "std::panicking::",
        "panic_unwind::",
        "std::sys::backtrace::__rust_end_short_backtrace",
        "std::sys_common::backtrace::__rust_end_short_backtrace",
        "std::panic::resume_unwind",
        "__rustc::",
        "core::panicking::panic_fmt::",
        "std::rt::begin_panic",
    ];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A function's name without the suffix the compiler gives the parts it
/// split off (`foo.cold`, `foo.cold.3`, `foo.part.0`): those parts belong
/// to `foo`.
pub fn base_function_name(name: &str) -> &str {
    for marker in [".cold", ".part."] {
        if let Some(i) = name.find(marker) {
            return &name[..i];
        }
    }
    name
}

/// C++ exception types that carry an R condition through C++ code (an R
/// error, interrupt or jump caught by Rcpp's or cpp11's unwind protection
/// and rethrown in R at the boundary): not failures of the C++ code.
pub fn is_r_unwind_carrier(type_name: &str) -> bool {
    matches!(
        type_name,
        "Rcpp::LongjumpException" | "cpp11::unwind_exception" | "Rcpp::internal::InterruptedException"
    )
}

/// The demangled name of a C++ type from its `type_info` name (`St13runtime_error`).
pub fn demangle_type(mangled: &str) -> String {
    let m = mangled.strip_prefix('*').unwrap_or(mangled);
    let full = format!("_ZTS{m}");
    if let Ok(sym) = cpp_demangle::Symbol::new(full.as_bytes()) {
        if let Ok(d) = sym.demangle_with_options(&cpp_demangle::DemangleOptions::default()) {
            if let Some(t) = d.strip_prefix("typeinfo name for ") {
                return t.to_string();
            }
        }
    }
    m.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machinery_and_carriers() {
        for name in [
            "__cxa_throw",
            "std::rethrow_exception(std::__exception_ptr::exception_ptr)",
            "std::panicking::begin_panic_handler::{{closure}}",
            "std::panicking::rust_panic_with_hook",
            "core::panicking::panic_fmt",
            "rust_panic",
            "panic_unwind::imp::panic",
            "__rustc::rust_begin_unwind",
            "std::sys::backtrace::__rust_end_short_backtrace",
        ] {
            assert!(is_throw_machinery(name), "{name}");
        }
        for name in
            ["level3", "std::__throw_out_of_range_fmt(char const*, ...)", "core::result::unwrap_failed"]
        {
            assert!(!is_throw_machinery(name), "{name}");
        }
        assert!(is_r_unwind_carrier("Rcpp::LongjumpException"));
        assert!(is_r_unwind_carrier("cpp11::unwind_exception"));
        assert!(!is_r_unwind_carrier("Rcpp::exception"));
    }

    #[test]
    fn split_function_parts_share_a_name() {
        assert_eq!(base_function_name("sourceCpp_1_f.cold"), "sourceCpp_1_f");
        assert_eq!(base_function_name("f.cold.12"), "f");
        assert_eq!(base_function_name("f.part.0"), "f");
        assert_eq!(base_function_name("wthrow::level1(int)"), "wthrow::level1(int)");
    }

    #[test]
    fn type_names_are_demangled() {
        assert_eq!(demangle_type("St13runtime_error"), "std::runtime_error");
        assert_eq!(demangle_type("St11range_error"), "std::range_error");
        assert_eq!(demangle_type("N4Rcpp9exceptionE"), "Rcpp::exception");
        assert_eq!(demangle_type("N4Rcpp17LongjumpExceptionE"), "Rcpp::LongjumpException");
        assert_eq!(demangle_type("*N12_GLOBAL__N_15localE"), "(anonymous namespace)::local");
        assert_eq!(demangle_type("i"), "int");
        assert_eq!(demangle_type("%%%"), "%%%");
    }
}
