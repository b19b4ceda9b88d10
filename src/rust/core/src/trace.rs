//! A captured native stack: unwound, checked, and (on request) symbolized.
//! Every frame is kept, the capture's own included; which of them a view
//! shows is decided in `view`.

use crate::debuginfo::Resolved;
use crate::modules::{self, Hit, ModuleMap};
use crate::symbolizer;
use crate::unwind::{self, Backend, StackEnd};
use std::sync::Arc;

/// One physical native frame.
#[derive(Clone, Debug)]
pub struct NativeFrame {
    pub ip: usize,
    /// Low end of the frame's stack memory.
    pub(crate) lo: usize,
    /// Index into the trace's module map.
    pub module: Option<usize>,
    /// The address symbols are looked up at: `ip - 1` for return addresses,
    /// so a call at the very end of a function resolves to that function.
    pub(crate) probe: usize,
}

impl NativeFrame {
    /// `probe` as a file-relative address of its module.
    pub(crate) fn file_probe(&self, map: &ModuleMap) -> Option<u64> {
        self.module.map(|m| self.probe.wrapping_sub(map.module(m).bias) as u64)
    }
}

#[derive(Clone, Debug)]
pub struct NativeTrace {
    pub backend: Backend,
    pub map: Arc<ModuleMap>,
    /// Innermost first, from the unwinder's own frames on.
    pub frames: Vec<NativeFrame>,
    /// Why the stack does not reach its outermost frame, if it does not.
    pub truncated: Option<String>,
}

/// Captures the calling thread's native stack.
#[inline(never)]
pub fn capture(backend: Backend) -> crate::error::Result<NativeTrace> {
    let stack = unwind::capture(backend)?;
    let map = modules::current();
    Ok(assemble(backend, map, stack.frames, stack.end))
}

/// Turns raw frames into a trace (pure apart from its inputs: used by tests
/// with synthetic maps).
pub(crate) fn assemble(
    backend: Backend,
    map: Arc<ModuleMap>,
    frames: Vec<unwind::Frame>,
    end: StackEnd,
) -> NativeTrace {
    let mut out = Vec::with_capacity(frames.len());
    let mut truncated = None;
    let mut prev_lo = 0usize;
    // Neighbouring frames are mostly in one segment (R's interpreter): it
    // is tried before the map's search.
    let mut last: Option<(std::ops::Range<usize>, Hit)> = None;
    for f in &frames {
        let hit = match &last {
            Some((seg, hit)) if seg.contains(&f.ip) => Some(*hit),
            _ => {
                last = map.lookup_segment(f.ip);
                last.as_ref().map(|(_, hit)| *hit)
            }
        };
        match hit {
            Some(h) if h.exec => {}
            _ => {
                truncated = Some(format!(
                    "unwinding reached address {:#x}, which is not code of any loaded module",
                    f.ip
                ));
                break;
            }
        }
        if f.lo != 0 && f.lo < prev_lo {
            truncated = Some("unwinding produced stack pointers out of order".to_string());
            break;
        }
        prev_lo = prev_lo.max(f.lo);
        out.push(NativeFrame {
            ip: f.ip,
            lo: f.lo,
            module: hit.map(|h| h.module),
            probe: if f.exact_ip { f.ip } else { f.ip.wrapping_sub(1) },
        });
    }

    if truncated.is_none() {
        truncated = match end {
            StackEnd::Failed(why) => Some(format!("unwinding failed ({why})")),
            StackEnd::Limit => Some(format!("more than {} frames", unwind::MAX_FRAMES)),
            StackEnd::Outermost => match out.last().and_then(|f| f.module) {
                Some(m) if plausible_outermost(&map, m) => None,
                _ => Some("unwinding stopped early, at a frame without unwind information".to_string()),
            },
        };
    }
    NativeTrace { backend, map, frames: out, truncated }
}

/// The outermost frame of a complete stack: `_start` in the executable, or
/// the C library's thread entry (threads, and R embedded on a thread other
/// than the process's first).
fn plausible_outermost(map: &ModuleMap, m: usize) -> bool {
    let module = map.module(m);
    module.is_main || module.basename().starts_with("libc.so")
}

impl NativeTrace {
    /// Symbol, file and line of each frame (innermost inlined call first).
    pub fn symbolize(&self) -> Vec<Arc<[Resolved]>> {
        let all: Vec<usize> = (0..self.frames.len()).collect();
        self.symbolize_some(&all)
    }

    /// `symbolize` for the frames at `indices` only. If the symbolizer is in
    /// use (re-entered), frames are left unnamed rather than waiting.
    pub fn symbolize_some(&self, indices: &[usize]) -> Vec<Arc<[Resolved]>> {
        let unnamed = || -> Arc<[Resolved]> { Arc::from(vec![Resolved::unnamed()]) };
        symbolizer::with_global(|s| {
            s.start_capture();
            indices
                .iter()
                .map(|&i| &self.frames[i])
                .map(|f| match f.module {
                    Some(m) => s.resolve_in(&self.map, m, f.file_probe(&self.map).unwrap_or(0)),
                    None => unnamed(),
                })
                .collect()
        })
        .unwrap_or_else(|| indices.iter().map(|_| unnamed()).collect())
    }
}

impl NativeTrace {
    /// Whether a debug file could name more of the frames at `indices`
    /// (symbolized as `resolved`): one of them has no name and is in a
    /// module with a build-id that was read without DWARF.
    pub fn debug_files_would_help(&self, indices: &[usize], resolved: &[Arc<[Resolved]>]) -> bool {
        symbolizer::with_global(|s| {
            indices.iter().zip(resolved).any(|(&i, r)| {
                let Some(m) = self.frames[i].module else { return false };
                r.iter().any(|f| f.func.is_none())
                    && self.map.module(m).build_id.is_some()
                    && s.module_has_dwarf(&self.map, m) == Some(false)
            })
        })
        .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::Module;
    use crate::unwind::Frame;

    fn module(path: &str, start: usize, end: usize, main: bool) -> Module {
        Module::synthetic(path, start, end, main)
    }

    fn map() -> Arc<ModuleMap> {
        Arc::new(ModuleMap::new(vec![
            module("/usr/lib/R/bin/exec/R", 0x1000, 0x2000, true),
            module("/lib/winch.so", 0x10000, 0x20000, false),
            module("/usr/lib/R/lib/libR.so", 0x30000, 0x40000, false),
        ]))
    }

    fn frames(spec: &[(usize, usize)]) -> Vec<Frame> {
        spec.iter().enumerate().map(|(i, &(ip, lo))| Frame { ip, lo, exact_ip: i == 0 }).collect()
    }

    const B: Backend = Backend::Backtrace;

    #[test]
    fn frames_are_kept_and_probe_backs_up() {
        let t = assemble(
            B,
            map(),
            frames(&[(0x10100, 10), (0x10200, 20), (0x30100, 30), (0x30200, 40), (0x1100, 50)]),
            StackEnd::Outermost,
        );
        assert_eq!(
            t.frames.iter().map(|f| f.ip).collect::<Vec<_>>(),
            vec![0x10100, 0x10200, 0x30100, 0x30200, 0x1100]
        );
        assert_eq!(t.frames[0].probe, 0x10100, "the innermost ip is exact");
        assert_eq!(t.frames[2].probe, 0x300ff);
        assert_eq!(t.frames[2].file_probe(&t.map), Some(0xff));
        assert_eq!(t.frames[2].module, Some(2));
        assert!(t.truncated.is_none());
    }

    #[test]
    fn garbage_addresses_truncate() {
        let t = assemble(
            B,
            map(),
            frames(&[(0x10100, 10), (0x30100, 30), (0xdead0000, 40), (0x1100, 50)]),
            StackEnd::Outermost,
        );
        assert_eq!(t.frames.len(), 2);
        assert!(t.truncated.as_deref().unwrap().contains("not code"));
    }

    #[test]
    fn early_stop_is_reported() {
        let t = assemble(B, map(), frames(&[(0x10100, 10), (0x30100, 30)]), StackEnd::Outermost);
        assert!(t.truncated.as_deref().unwrap().contains("stopped early"));
        let t = assemble(B, map(), frames(&[(0x10100, 10), (0x30100, 30)]), StackEnd::Failed("x".into()));
        assert!(t.truncated.as_deref().unwrap().contains("failed"));
        let t =
            assemble(B, map(), frames(&[(0x10100, 10), (0x30100, 30), (0x30100, 20)]), StackEnd::Outermost);
        assert!(t.truncated.as_deref().unwrap().contains("out of order"));
    }

    #[inline(never)]
    fn capture_here(backend: Backend) -> NativeTrace {
        capture(backend).unwrap()
    }

    #[test]
    fn live_capture_on_a_thread_is_complete_and_symbolized() {
        for b in Backend::ALL.into_iter().filter(|b| b.is_available()) {
            let t = std::thread::spawn(move || capture_here(b)).join().unwrap();
            assert!(t.truncated.is_none(), "{}: {:?}", b.name(), t.truncated);
            let names = t.symbolize();
            let funcs: Vec<String> = names
                .iter()
                .flat_map(|r| r.iter().filter_map(|f| f.func.as_deref().map(String::from)))
                .collect();
            // The test binary has DWARF: this very function is named.
            assert!(funcs.iter().any(|f| f.ends_with("tests::capture_here")), "{}: {funcs:?}", b.name());
            // The outermost frame is in libc (clone3).
            let last = t.frames.last().unwrap().module.unwrap();
            assert!(t.map.module(last).basename().starts_with("libc.so"));
        }
    }
}
