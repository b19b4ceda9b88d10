//! Which native frames each view shows, and in what order: the one place
//! that decides it for `winch_trace_back()`, `winch_sys_calls()`, the rlang
//! views and the placement's notion of "code R called".

use crate::modules::{Module, ModuleMap};

/// What is known about one native frame, for showing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Class {
    /// winch's own capture machinery (the unwinder and winch's frames up to
    /// the end of the innermost run of frames in winch's library): never
    /// shown.
    pub(crate) capture: bool,
    /// R's interpreter: R's shared library or R's executable (`is_libr`).
    pub interpreter: bool,
    /// The program that runs R, further out than the interpreter's outermost
    /// frame (its `main()`, the C library's start code). Only known on a
    /// stack unwound to its end.
    pub(crate) host: bool,
}

impl Class {
    /// Code that R's evaluation called: what joint views place among R
    /// frames.
    pub(crate) fn is_code(&self) -> bool {
        !self.capture && !self.interpreter && !self.host
    }
}

/// The modules that decide the classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Known {
    /// winch's own shared library.
    pub(crate) own: Option<usize>,
    /// The module holding R's interpreter (libR.so, or the executable when R
    /// is linked statically).
    pub(crate) interpreter: Option<usize>,
}

impl Known {
    /// The modules of `map` holding winch's code (`own`, an address in it)
    /// and R's interpreter (`interpreter`).
    pub fn at(map: &crate::modules::ModuleMap, own: usize, interpreter: usize) -> Known {
        Known { own: map.module_of(own), interpreter: map.module_of(interpreter) }
    }
}

/// R's executable, as R installs it (`bin/exec/R`, or `Rterm` on Windows).
pub(crate) fn is_r_executable(m: &Module) -> bool {
    m.is_main && (m.path.ends_with("/bin/exec/R") || m.path.ends_with("/bin/exec/Rterm"))
}

/// Classes of frames whose modules are `modules` (innermost first).
/// `complete`: the stack was unwound to its outermost frame.
pub fn classify(map: &ModuleMap, modules: &[Option<usize>], known: Known, complete: bool) -> Vec<Class> {
    let mut out: Vec<Class> = modules
        .iter()
        .map(|&m| Class {
            capture: false,
            interpreter: m.is_some_and(|m| Some(m) == known.interpreter || is_r_executable(map.module(m))),
            host: false,
        })
        .collect();
    // The capture: everything up to the first frame of winch's library, and
    // the run of its frames from there.
    if let Some(own) = known.own {
        if let Some(first) = modules.iter().position(|&m| m == Some(own)) {
            let mut end = first;
            while end < modules.len() && modules[end] == Some(own) {
                end += 1;
            }
            out[..end].iter_mut().for_each(|c| c.capture = true);
        }
    }
    // Only a complete stack shows where the interpreter's outermost frame is.
    if complete {
        if let Some(outermost) = modules.iter().rposition(|&m| m.is_some() && m == known.interpreter) {
            out[outermost + 1..].iter_mut().for_each(|c| c.host = true);
        }
    }
    out
}

/// A way of showing native frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// `winch_trace_back()`: innermost first, the program's start code
    /// included; the interpreter's frames only with `libr`.
    TraceBack { libr: bool },
    /// Joint views (`winch_sys_calls()`, rlang traces): outermost first,
    /// frames of R's evaluation only; the interpreter's frames only with
    /// `libr`.
    Joint { libr: bool },
}

/// The indices of the frames `view` shows, in its order.
pub fn select(classes: &[Class], view: View) -> Vec<usize> {
    let shown = |c: &Class| match view {
        View::TraceBack { libr } => !c.capture && (libr || !c.interpreter),
        View::Joint { libr } => !c.capture && !c.host && (libr || !c.interpreter),
    };
    let keep = (0..classes.len()).filter(|&i| shown(&classes[i]));
    match view {
        View::TraceBack { .. } => keep.collect(),
        View::Joint { .. } => {
            let mut v: Vec<usize> = keep.collect();
            v.reverse();
            v
        }
    }
}

/// The label of a native frame that has no name, the same in traces,
/// profiles and crash reports: the start of its function relative to its
/// module (`+0x1a20`, from the unwind information: one label for every
/// frame in that function), or, where that start is not known, the frame's
/// own offset in its module marked `?` (`+0x1a2b?`). Writes the label's
/// bytes to `out` without allocating (the crash report's handler uses it).
pub fn write_unnamed_label(start: Option<usize>, offset: usize, mut out: impl FnMut(&[u8])) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let value = start.unwrap_or(offset);
    let mut buf = [0u8; 22];
    buf[..3].copy_from_slice(b"+0x");
    let digits = ((usize::BITS - value.leading_zeros()).div_ceil(4)).max(1) as usize;
    for k in 0..digits {
        buf[3 + k] = DIGITS[(value >> (4 * (digits - 1 - k))) & 0xf];
    }
    let mut len = 3 + digits;
    if start.is_none() {
        buf[len] = b'?';
        len += 1;
    }
    out(&buf[..len]);
}

/// [`write_unnamed_label`] as a string.
pub(crate) fn unnamed_label(start: Option<usize>, offset: usize) -> String {
    let mut s = String::new();
    write_unnamed_label(start, offset, |b| s.push_str(std::str::from_utf8(b).unwrap_or("")));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str, start: usize, main: bool) -> Module {
        Module::synthetic(path, start, start + 0x1000, main)
    }

    const EXE: usize = 0;
    const LIBR: usize = 1;
    const WINCH: usize = 2;
    const PKG: usize = 3;
    const LIBC: usize = 4;
    const UNWIND: usize = 5;

    fn map(exe: &str) -> ModuleMap {
        ModuleMap::new(vec![
            module(exe, 0x1000, true),
            module("/usr/lib/R/lib/libR.so", 0x10000, false),
            module("/usr/lib/R/site-library/winch/libs/winch.so", 0x20000, false),
            module("/tmp/pkg.so", 0x30000, false),
            module("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x40000, false),
            module("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1", 0x50000, false),
        ])
    }

    const KNOWN: Known = Known { own: Some(WINCH), interpreter: Some(LIBR) };

    /// A capture from R code that called pkg.so, which called back into R
    /// and then into winch_call() of winch.so, which called back into R,
    /// which captured: innermost first.
    fn stack() -> Vec<Option<usize>> {
        vec![
            Some(UNWIND), // the unwinder
            Some(WINCH),  // winch's capture code
            Some(WINCH),
            Some(LIBR),  // .Call of the capture
            Some(WINCH), // winch_call(): a real frame to show
            Some(LIBR),
            Some(PKG),
            Some(LIBC), // qsort calling back, say
            Some(PKG),
            Some(LIBR),
            Some(EXE),  // R's main()
            Some(LIBC), // __libc_start_main
            Some(EXE),  // _start
        ]
    }

    #[test]
    fn classes_of_a_complete_stack() {
        let c = classify(&map("/usr/lib/R/bin/exec/R"), &stack(), KNOWN, true);
        let capture: Vec<bool> = c.iter().map(|c| c.capture).collect();
        assert_eq!(&capture[..4], &[true, true, true, false]);
        assert!(!c[4].capture, "winch_call() further out is not the capture");
        let interpreter: Vec<usize> = (0..c.len()).filter(|&i| c[i].interpreter).collect();
        assert_eq!(interpreter, vec![3, 5, 9, 10, 12]);
        let host: Vec<usize> = (0..c.len()).filter(|&i| c[i].host).collect();
        assert_eq!(host, vec![10, 11, 12]);
        let code: Vec<usize> = (0..c.len()).filter(|&i| c[i].is_code()).collect();
        assert_eq!(code, vec![4, 6, 7, 8]);
    }

    #[test]
    fn views_select_and_order() {
        let c = classify(&map("/usr/lib/R/bin/exec/R"), &stack(), KNOWN, true);
        assert_eq!(select(&c, View::TraceBack { libr: false }), vec![4, 6, 7, 8, 11]);
        assert_eq!(select(&c, View::TraceBack { libr: true }), vec![3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(select(&c, View::Joint { libr: false }), vec![8, 7, 6, 4]);
        assert_eq!(select(&c, View::Joint { libr: true }), vec![9, 8, 7, 6, 5, 4, 3]);
    }

    #[test]
    fn a_truncated_stack_has_no_host_frames() {
        let mut s = stack();
        s.truncate(8);
        let c = classify(&map("/usr/lib/R/bin/exec/R"), &s, KNOWN, false);
        assert!(c.iter().all(|c| !c.host));
        assert_eq!(select(&c, View::Joint { libr: false }), vec![7, 6, 4]);
    }

    #[test]
    fn an_embedding_program_is_host_not_interpreter() {
        // R embedded in another program: its executable is not R's.
        let c = classify(&map("/usr/bin/myapp"), &stack(), KNOWN, true);
        assert!(!c[10].interpreter && c[10].host);
        assert_eq!(select(&c, View::TraceBack { libr: false }), vec![4, 6, 7, 8, 10, 11, 12]);
    }

    #[test]
    fn unknown_modules_and_no_own_library() {
        let modules = vec![None, Some(PKG), Some(LIBR)];
        let c = classify(
            &map("/usr/lib/R/bin/exec/R"),
            &modules,
            Known { own: None, interpreter: Some(LIBR) },
            true,
        );
        assert_eq!(c[0], Class::default());
        assert!(c[1].is_code() && c[2].interpreter);
        assert_eq!(select(&c, View::Joint { libr: false }), vec![1, 0]);
    }

    #[test]
    fn unnamed_frames_are_labelled_by_function_start_or_own_offset() {
        assert_eq!(unnamed_label(Some(0x1a20), 0x1a2b), "+0x1a20");
        assert_eq!(unnamed_label(None, 0x1a2b), "+0x1a2b?");
        assert_eq!(unnamed_label(Some(0), 5), "+0x0");
        assert_eq!(unnamed_label(None, usize::MAX), "+0xffffffffffffffff?");
    }
}
