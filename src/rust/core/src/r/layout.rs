//! The layout of R's context records (`RCNTXT`) per R version, and the
//! constants of their `callflag`. Offsets come from the C compiler
//! (`csrc/rcontext_layout.c`), since everything after `cjmpbuf` moves with
//! the platform's `sigjmp_buf`.

/// `callflag` bits (R's Defn.h).
pub const CTXT_TOPLEVEL: i32 = 0;
pub const CTXT_LOOP: i32 = 3;
pub const CTXT_FUNCTION: i32 = 4;
pub const CTXT_BUILTIN: i32 = 64;
/// Largest valid `callflag` (all defined bits set).
pub const CTXT_MAX: i32 = 255;

/// The R version running, as `(major, minor)`.
pub type RVersion = (u32, u32);

/// Byte offsets of the fields read, and the size of the part read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub(crate) next: usize,
    pub(crate) callflag: usize,
    pub(crate) evaldepth: usize,
    pub(crate) callfun: usize,
    pub(crate) sysparent: usize,
    pub(crate) call: usize,
    pub(crate) cloenv: usize,
    pub(crate) bcintactive: usize,
    pub(crate) bcbody: usize,
    pub(crate) bcpc: usize,
    /// R >= 4.4 only.
    pub(crate) relpc: Option<usize>,
    pub(crate) srcref: usize,
    pub(crate) size: usize,
}

#[cfg(target_os = "linux")]
extern "C" {
    fn winch_rcontext_layout(variant: std::ffi::c_int, out: *mut usize) -> std::ffi::c_int;
}

impl Layout {
    /// The layout of `RCNTXT` in R `version` for this platform's C ABI, or
    /// None where it is not known (R before 4.0, or no shim here). Versions
    /// after the newest known one are assumed unchanged: everything read is
    /// validated before use, so a changed layout means a fallback, not
    /// wrong output.
    #[cfg(not(target_os = "linux"))]
    pub fn for_r(_version: RVersion) -> Option<Layout> {
        None
    }

    #[cfg(target_os = "linux")]
    pub fn for_r(version: RVersion) -> Option<Layout> {
        let variant = match version {
            (4, 0..=3) => 40,
            (4, _) | (5.., _) => 44,
            _ => return None,
        };
        let mut v = [0usize; 13];
        // SAFETY: the shim writes at most 13 values into `v`.
        if unsafe { winch_rcontext_layout(variant, v.as_mut_ptr()) } == 0 {
            return None;
        }
        Some(Layout {
            next: v[0],
            callflag: v[1],
            evaldepth: v[2],
            callfun: v[3],
            sysparent: v[4],
            call: v[5],
            cloenv: v[6],
            bcintactive: v[7],
            bcbody: v[8],
            bcpc: v[9],
            relpc: (v[10] != usize::MAX).then_some(v[10]),
            srcref: v[11],
            size: v[12],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_plausible() {
        for v in [(4, 0), (4, 2), (4, 3), (4, 4), (4, 5), (4, 6), (4, 9)] {
            let l = Layout::for_r(v).unwrap();
            assert_eq!(l.next, 0);
            assert_eq!(l.callflag, std::mem::size_of::<usize>());
            assert!(l.evaldepth > l.callflag + 64, "sigjmp_buf lies between them");
            assert_eq!(l.callfun + 8, l.sysparent);
            assert_eq!(l.call + 8, l.cloenv);
            assert_eq!(l.bcbody + 8, l.bcpc);
            assert!(l.size >= l.srcref + 8);
            assert_eq!(l.relpc.is_some(), v >= (4, 4), "{v:?}");
            #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
            {
                // Worked out by hand from Defn.h (sigjmp_buf is 200 bytes).
                assert_eq!((l.evaldepth, l.cloenv, l.bcintactive, l.bcpc), (220, 256, 304, 320));
                let want = if v >= (4, 4) { (Some(328), 384) } else { (None, 368) };
                assert_eq!((l.relpc, l.srcref), want, "{v:?}");
            }
        }
        assert!(Layout::for_r((3, 6)).is_none());
    }
}
