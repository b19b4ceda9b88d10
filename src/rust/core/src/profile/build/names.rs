//! Which native functions are R's interpreter, the C library or a
//! parallel runtime, and the labels of loops and native functions as
//! Rprof's format and pprof show them.

use crate::profile::labels;

/// Functions of R's library that run R code (evaluation, closures,
/// dispatch, the REPL, top-level contexts): R's own frames stand for them.
pub(super) fn is_interpreter(name: &str) -> bool {
    const NAMES: [&str; 24] = [
        "Rf_eval",
        "Rf_applyClosure",
        "R_execClosure",
        "R_execMethod",
        "R_forceAndCall",
        "R_EvalSymbol",
        "bcEval",
        "bcEval_loop",
        "R_ToplevelExec",
        "R_tryEval",
        "R_tryEvalSilent",
        "R_tryCatch",
        "R_tryCatchError",
        "R_tryWrap",
        "R_ExecWithCleanup",
        "R_UnwindProtect",
        "R_withCallingErrorHandler",
        "Rf_ReplIteration",
        "R_ReplDLLdo1",
        "run_Rmainloop",
        "Rf_mainloop",
        "setup_Rmainloop",
        "R_ParseEvalString",
        "do_tryCatchHelper",
    ];
    let base = crate::profile::model::strip_parameters(name);
    NAMES.contains(&base) || base.starts_with("Rf_Dispatch") || base.starts_with("R_possible_dispatch")
}

/// The C library's modules: a thread's outermost frames there are its
/// start's plumbing, its innermost ones system calls.
pub(super) fn is_libc(base: &str) -> bool {
    ["libc.so", "libc-", "libpthread", "ld-linux"].iter().any(|p| base.starts_with(p))
}

/// C++ standard libraries whose thread start only calls the thread's
/// callable (`std::thread`: libstdc++'s `execute_native_thread_routine`):
/// the callable's module, not theirs, says where the thread's work comes
/// from.
pub(super) fn is_thread_start_library(base: &str) -> bool {
    ["libstdc++", "libc++"].iter().any(|p| base.starts_with(p))
}

/// Parallel runtimes: time in their own code is spinning, waiting or
/// handing out work (`[wait]`).
pub(super) fn is_runtime(base: &str) -> bool {
    ["libgomp", "libomp", "libiomp", "libtbb"].iter().any(|p| base.starts_with(p))
        && !base.starts_with("libtbbmalloc")
}

/// A loop's label: its kind after its function's label, without spaces
/// or double quotes (Rprof's format separates labels by spaces and quotes
/// them).
pub(super) fn loop_label(owner: &str, kind: &str) -> String {
    owner.chars().map(|c| if c == ' ' || c == '"' { '_' } else { c }).chain(kind.chars()).collect()
}

pub(super) fn is_loop(label: u32) -> bool {
    matches!(label, labels::FOR | labels::WHILE | labels::REPEAT | labels::LOOP)
}

/// A native function's name as an Rprof label: without its parameter list
/// (a C++ name's trailing `(...)`, and what follows it, such as `const`),
/// and without spaces (`std::vector<int, std::allocator<int> >` becomes
/// `std::vector<int,std::allocator<int>>`; any other space `_`).
pub fn native_label(name: &str) -> String {
    let base = crate::profile::model::strip_parameters(name);
    let mut out = String::with_capacity(base.len());
    let chars: Vec<char> = base.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            ' ' => {
                let after_comma = i > 0 && chars[i - 1] == ',';
                let before_close = chars.get(i + 1) == Some(&'>');
                if !after_comma && !before_close {
                    out.push('_');
                }
            }
            '"' => out.push('_'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_labelled_with_their_function() {
        assert_eq!(loop_label("glm.fit", "[for]"), "glm.fit[for]");
        assert_eq!(loop_label("", "[while]"), "[while]");
        assert_eq!(loop_label("my fun", "[repeat]"), "my_fun[repeat]");
        assert_eq!(loop_label("x[[\"a\"]]", "[for]"), "x[[_a_]][for]");
    }

    #[test]
    fn native_labels_drop_parameters_and_spaces() {
        assert_eq!(native_label("rt_call"), "rt_call");
        assert_eq!(native_label("wtest::evaluate(int, double) const"), "wtest::evaluate");
        assert_eq!(
            native_label("std::vector<int, std::allocator<int> >::push_back(int const&)"),
            "std::vector<int,std::allocator<int>>::push_back"
        );
        assert_eq!(native_label("(anonymous namespace)::helper(int)"), "(anonymous_namespace)::helper");
        assert_eq!(native_label("Foo::operator()(int)"), "Foo::operator()");
        assert_eq!(native_label("mycrate::module::function"), "mycrate::module::function");
        assert_eq!(native_label("f(void (*)(int))"), "f");
    }
}
