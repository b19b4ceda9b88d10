//! winch from outside: the joint stack of another process, which never
//! loaded winch, read through `ptrace` and `process_vm_readv` while it is
//! stopped for a moment.
//!
//! * `ptrace`: stopping every thread and letting it go on, on every way
//!   out (`tracees`: what the kernel reported of each thread);
//! * `target`: what the process has loaded (from `/proc/PID/maps` and the
//!   loaded images' headers in its memory) and where its R keeps its state;
//! * `core_file`: a core file read as the process it was made of;
//! * `deparse`: R calls read from its memory as R source;
//! * [`dump`]: every thread's native frames and R's frames placed among
//!   them;
//! * [`recorder`]: sampling it, into the profiler's sample records (`running`:
//!   which threads each tick samples);
//! * [`registration`]: R's table of registered native routines there;
//! * [`tree`]: recording a process and its descendants.

pub(crate) mod core_file;
pub(crate) mod deparse;
pub mod dump;
pub(crate) mod ptrace;
pub mod recorder;
pub mod registration;
mod running;
pub(crate) mod target;
mod tracees;
pub mod tree;

pub use crate::procfs::Usage;

/// What process `pid` has used so far (CPU times, memory, faults,
/// switches), from `/proc`.
pub fn usage(pid: i32) -> Usage {
    crate::procfs::usage(crate::procfs::Proc::Pid(pid))
}

/// At most this many descendants are listed (a fork bomb is not followed).
pub const MAX_DESCENDANTS: usize = 4096;

/// The descendants of process `pid` now, as (pid, parent pid), each after
/// its parent (depth first, children in the kernel's order): processes not
/// yet waited for by their parent, living or ended. At most
/// [`MAX_DESCENDANTS`]; none where the kernel does not list children
/// (`task/*/children`, see `procfs::children`) or `pid` is gone.
pub fn descendants(pid: i32) -> Vec<(i32, i32)> {
    descendants_with(pid, |p| crate::procfs::children(crate::procfs::Proc::Pid(p)).unwrap_or_default())
}

/// [`descendants`] over a listing of each process's children.
fn descendants_with(pid: i32, mut children: impl FnMut(i32) -> Vec<i32>) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> = Vec::new();
    let mut seen = std::collections::HashSet::from([pid]);
    // (A stack of parents, each with its children not yet visited.)
    let mut stack = vec![(pid, children(pid).into_iter())];
    while let Some((parent, rest)) = stack.last_mut() {
        let parent = *parent;
        let Some(child) = rest.next() else {
            stack.pop();
            continue;
        };
        // (A pid reused while listing could make a loop.)
        if out.len() >= MAX_DESCENDANTS || !seen.insert(child) {
            continue;
        }
        out.push((child, parent));
        stack.push((child, children(child).into_iter()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_come_depth_first_after_their_parents_without_loops() {
        let tree = |p: i32| match p {
            1 => vec![2, 5],
            2 => vec![3, 4],
            4 => vec![1], // a reused pid pointing back: not followed
            5 => vec![3], // seen already
            _ => vec![],
        };
        assert_eq!(descendants_with(1, tree), vec![(2, 1), (3, 2), (4, 2), (5, 1)]);
        assert_eq!(descendants_with(9, tree), vec![]);
        let wide = |p: i32| if p == 0 { (1..=5000).collect() } else { vec![] };
        assert_eq!(descendants_with(0, wide).len(), MAX_DESCENDANTS);
    }

    #[test]
    fn this_process_children_are_its_descendants() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let found = descendants(std::process::id() as i32).contains(&(pid, std::process::id() as i32));
        child.kill().unwrap();
        child.wait().unwrap();
        if crate::procfs::children(crate::procfs::Proc::This).is_none() {
            eprintln!("skipped: this kernel has no task/*/children files");
            return;
        }
        assert!(found);
        assert!(descendants(i32::MAX).is_empty());
    }
}
