//! The processes working for a process, as they are now: its descendants
//! (forked workers, programs it runs, callr's sessions) and its workers,
//! which are not its descendants: a PSOCK cluster's R sessions
//! (`parallel::makeCluster()`, future's `multisession`) are started by a
//! shell that exits, so their parent is init. A worker is found through
//! its connection: a process on this machine holding the other end of one
//! of the process's TCP connections, running the same executable, and
//! started after it (so that a worker's own R session is never taken for
//! its worker, nor is an unrelated server or a browser).

use crate::procfs::{self, sockets, Proc};
use std::collections::HashSet;

/// At most this many processes are listed (a fork bomb is not followed).
pub const MAX_DESCENDANTS: usize = 4096;

/// How a listed process is related to the one before it in the listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// Its child.
    Child,
    /// Its worker (see the module's comment).
    Worker,
}

/// A process working for another, directly or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relative {
    pub pid: i32,
    /// The process it works for: its parent, or the one it is a worker of.
    pub parent: i32,
    pub relation: Relation,
}

/// The descendants of process `pid` now, as (pid, parent pid), each after
/// its parent (depth first, children in the kernel's order): processes not
/// yet waited for by their parent, living or ended. At most
/// [`MAX_DESCENDANTS`]; none where the kernel does not list children
/// (`task/*/children`, see `procfs::children`) or `pid` is gone.
pub fn descendants(pid: i32) -> Vec<(i32, i32)> {
    relatives(pid, false).into_iter().map(|r| (r.pid, r.parent)).collect()
}

/// The processes working for process `pid` now, each after the one it
/// works for (depth first): its descendants as [`descendants`] lists them
/// and, with `with_workers`, its [`workers`], their descendants and
/// workers, and the workers of its descendants. At most
/// [`MAX_DESCENDANTS`].
pub fn relatives(pid: i32, with_workers: bool) -> Vec<Relative> {
    let mut tables = Tables::default();
    relatives_by(pid, |p| if with_workers { workers_with(p, &mut tables) } else { Vec::new() })
}

/// [`relatives`] with each process's workers as `workers_of` gives them
/// (a recording takes those its finder found last).
pub(crate) fn relatives_by(pid: i32, mut workers_of: impl FnMut(i32) -> Vec<i32>) -> Vec<Relative> {
    // (winch's own tracer process works for winch, not for the process.)
    let tracers = crate::outside::helper::pids();
    relatives_with(pid, |p| {
        let mut near: Vec<(i32, Relation)> = procfs::children(Proc::Pid(p))
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !tracers.contains(c))
            .map(|c| (c, Relation::Child))
            .collect();
        near.extend(workers_of(p).into_iter().map(|w| (w, Relation::Worker)));
        near
    })
}

/// [`relatives`] over a listing of each process's nearest relatives.
fn relatives_with(pid: i32, mut near: impl FnMut(i32) -> Vec<(i32, Relation)>) -> Vec<Relative> {
    let mut out: Vec<Relative> = Vec::new();
    let mut seen = HashSet::from([pid]);
    // (A stack of processes, each with its relatives not yet visited.)
    let mut stack = vec![(pid, near(pid).into_iter())];
    while let Some((parent, rest)) = stack.last_mut() {
        let parent = *parent;
        let Some((child, relation)) = rest.next() else {
            stack.pop();
            continue;
        };
        // (A pid reused while listing could make a loop.)
        if out.len() >= MAX_DESCENDANTS || !seen.insert(child) {
            continue;
        }
        out.push(Relative { pid: child, parent, relation });
        stack.push((child, near(child).into_iter()));
    }
    out
}

/// The connection tables of the network namespaces seen in one listing,
/// each read once: the kernel walks every bucket of its connection hash to
/// write them (about 5 ms a table on a machine with 24 GiB).
#[derive(Default)]
pub(crate) struct Tables {
    by_namespace: Vec<(std::path::PathBuf, Vec<sockets::Connection>)>,
}

impl Tables {
    /// The connections of process `pid`'s network namespace.
    fn of(&mut self, pid: i32) -> &[sockets::Connection] {
        let ns = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap_or_default();
        let at = match self.by_namespace.iter().position(|(n, _)| *n == ns && !ns.as_os_str().is_empty()) {
            Some(at) => at,
            None => {
                self.by_namespace.push((ns, sockets::connections(Proc::Pid(pid))));
                self.by_namespace.len() - 1
            }
        };
        &self.by_namespace[at].1
    }
}

/// The workers of process `pid` now, in pid order: processes holding the
/// other end of one of its established TCP connections (in its network
/// namespace), running the same executable, started after it (in the same
/// clock tick: with a larger pid). None when it has no connection, or is
/// gone; processes of other users are not seen.
pub fn workers(pid: i32) -> Vec<i32> {
    workers_with(pid, &mut Tables::default())
}

/// Workers found before: of process `pid` (started at `start`), through
/// its sockets `mine` (sorted), whose other ends are `peers`. (A profile
/// looks for them as it starts, before the profiled code runs: reading
/// the connection tables and every process's sockets takes 15 ms or more,
/// while a cluster usually lives through many profiles.)
struct Known {
    pid: i32,
    start: u64,
    mine: Vec<u64>,
    peers: HashSet<u64>,
    workers: Vec<(i32, u64)>,
}

/// The latest [`Known`]s, the newest last.
static FOUND: std::sync::Mutex<Vec<Known>> = std::sync::Mutex::new(Vec::new());
const FOUND_KEPT: usize = 8;

/// [`workers`] with the connection tables read so far. Those found before
/// through the same sockets are taken again when each still runs (the
/// same start time) and still holds one of the other ends: the sockets of
/// established connections do not change ends, so no process can have
/// become a worker but by taking a socket from one (a worker's fork: its
/// child, which is listed as such).
pub(crate) fn workers_with(pid: i32, tables: &mut Tables) -> Vec<i32> {
    let of = Proc::Pid(pid);
    let mut sorted = sockets::socket_inodes(of);
    if sorted.is_empty() {
        return Vec::new();
    }
    sorted.sort_unstable();
    sorted.dedup();
    let Some(start) = procfs::start_ticks(pid) else { return Vec::new() };
    let holds =
        |p: i32, peers: &HashSet<u64>| sockets::socket_inodes(Proc::Pid(p)).iter().any(|i| peers.contains(i));
    {
        let found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = found.iter().rev().find(|f| f.pid == pid && f.start == start && f.mine == sorted) {
            if f.workers.iter().all(|&(w, t)| procfs::start_ticks(w) == Some(t) && holds(w, &f.peers)) {
                return f.workers.iter().map(|w| w.0).collect();
            }
        }
    }
    let mine: HashSet<u64> = sorted.iter().copied().collect();
    let peers = sockets::peer_inodes(tables.of(pid), &mine);
    if peers.is_empty() {
        return Vec::new();
    }
    let Ok(exe) = procfs::exe(of) else { return Vec::new() };
    let later = |p: i32| procfs::start_ticks(p).is_some_and(|t| t > start || (t == start && p > pid));
    let mut out: Vec<i32> = procfs::pids()
        .into_iter()
        .filter(|&p| {
            p != pid && procfs::exe(Proc::Pid(p)).is_ok_and(|e| e == exe) && later(p) && holds(p, &peers)
        })
        .collect();
    out.sort_unstable();
    let workers: Vec<(i32, u64)> = out.iter().filter_map(|&w| Some((w, procfs::start_ticks(w)?))).collect();
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    found.retain(|f| f.pid != pid);
    if found.len() >= FOUND_KEPT {
        found.remove(0);
    }
    found.push(Known { pid, start, mine: sorted, peers, workers });
    out
}

/// A process working for another, with what it used so far (see
/// `watch`).
#[derive(Clone, Debug, PartialEq)]
pub struct RelativeUse {
    pub relative: Relative,
    /// When it started, in clock ticks after boot (a pid reused between
    /// two listings is another process).
    pub start_ticks: u64,
    /// Its CPU time so far, user and system, in seconds.
    pub cpu_s: f64,
    pub command: String,
}

/// What `relative` has used so far; None if it has ended.
pub(crate) fn use_of(relative: Relative) -> Option<RelativeUse> {
    let of = Proc::Pid(relative.pid);
    let stat = procfs::stat(of, None)?;
    let start_ticks = procfs::start_ticks(relative.pid)?;
    Some(RelativeUse {
        relative,
        start_ticks,
        cpu_s: stat.cpu_ticks() as f64 / procfs::clock_ticks() as f64,
        command: procfs::cmdline(of),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn relatives_come_depth_first_after_the_process_they_work_for_without_loops() {
        use Relation::{Child, Worker};
        let tree = |p: i32| match p {
            1 => vec![(2, Child), (5, Worker)],
            2 => vec![(3, Child), (4, Child)],
            4 => vec![(1, Child)],  // a reused pid pointing back: not followed
            5 => vec![(3, Worker)], // seen already
            _ => vec![],
        };
        let r = |pid, parent, relation| Relative { pid, parent, relation };
        assert_eq!(
            relatives_with(1, tree),
            vec![r(2, 1, Child), r(3, 2, Child), r(4, 2, Child), r(5, 1, Worker)]
        );
        assert_eq!(relatives_with(9, tree), vec![]);
        let wide = |p: i32| if p == 0 { (1..=5000).map(|c| (c, Child)).collect() } else { vec![] };
        assert_eq!(relatives_with(0, wide).len(), MAX_DESCENDANTS);
    }

    #[test]
    fn this_process_children_are_its_descendants() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let found = descendants(std::process::id() as i32).contains(&(pid, std::process::id() as i32));
        child.kill().unwrap();
        child.wait().unwrap();
        if procfs::children(Proc::This).is_none() {
            eprintln!("skipped: this kernel has no task/*/children files");
            return;
        }
        assert!(found);
        assert!(descendants(i32::MAX).is_empty());
    }

    #[test]
    fn a_child_burning_cpu_is_listed_with_its_time_and_command() {
        // A shell that counts (CPU time of its own, no programs run), then
        // sleeps until killed: listed once its `sleep` has started.
        let script = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec sleep 30";
        let mut child = std::process::Command::new("sh").args(["-c", script]).spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !procfs::cmdline(Proc::Pid(pid)).starts_with("sleep") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let found: Vec<RelativeUse> =
            relatives(std::process::id() as i32, true).into_iter().filter_map(use_of).collect();
        child.kill().unwrap();
        child.wait().unwrap();
        if procfs::children(Proc::This).is_none() {
            eprintln!("skipped: this kernel has no task/*/children files");
            return;
        }
        let me = found.iter().find(|r| r.relative.pid == pid).expect("the child is listed");
        assert_eq!(me.relative.relation, Relation::Child);
        assert_eq!(me.command, "sleep 30");
        assert!(me.start_ticks > 0);
        // Counting to 200,000 in a shell takes tens of milliseconds at
        // least: more than one clock tick.
        assert!(me.cpu_s > 0.0, "{}", me.cpu_s);
        assert!(relatives(i32::MAX, true).is_empty());
    }

    #[test]
    fn a_process_connected_to_this_one_and_started_after_it_is_its_worker_not_the_reverse() {
        // The worker: a fork of this test (the same executable, started
        // later) that connects to this process's listener and stays until
        // the connection closes, or 20 s. A `sleep` child, started later
        // too but not connected, and one connected but running another
        // program are not workers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // SAFETY: the child connects, reads and leaves with _exit; glibc's
        // malloc is usable after fork.
        let worker = unsafe { libc::fork() };
        if worker == 0 {
            if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(20)));
                let _ = s.read(&mut [0u8; 1]);
            }
            // SAFETY: leaves the child at once, nothing run at exit.
            unsafe { libc::_exit(0) };
        }
        assert!(worker > 0);
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let accepted = listener.accept();
        let script = format!("exec 3<>/dev/tcp/127.0.0.1/{}; read -t 20 <&3", addr.port());
        let mut other = std::process::Command::new("bash").args(["-c", &script]).spawn().unwrap();
        let accepted_other = listener.accept();
        let me = std::process::id() as i32;
        let found = workers(me);
        // Found again through the same sockets: the same.
        let again = workers(me);
        let of_worker = workers(worker);
        let listed = relatives(me, true);
        drop((accepted, accepted_other));
        other.kill().ok();
        other.wait().ok();
        // SAFETY: our own child; waited for below.
        unsafe { libc::kill(worker, libc::SIGKILL) };
        let mut status = 0;
        // SAFETY: as above.
        unsafe { libc::waitpid(worker, &mut status, 0) };
        sleeper.kill().ok();
        sleeper.wait().ok();
        assert!(found.contains(&worker), "{found:?} has the worker {worker}");
        assert_eq!(again, found);
        // Its connection closed and the worker gone: no longer found.
        assert!(!workers(me).contains(&worker));
        assert!(!found.contains(&(sleeper.id() as i32)), "not connected");
        assert!(!found.contains(&(other.id() as i32)), "connected, another program");
        assert!(!of_worker.contains(&me), "a worker's R session is not its worker");
        if procfs::children(Proc::This).is_some() {
            // Also this process's child: listed once, as the first found.
            assert_eq!(listed.iter().filter(|r| r.pid == worker).count(), 1);
        }
        assert!(workers(i32::MAX).is_empty());
    }
}
