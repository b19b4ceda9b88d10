//! The stacks of a profile: each distinct stack's entries (see `record`)
//! made into locations, native addresses named with the modules of the
//! snapshot they were sampled with (see [`placement`]), R labels looked
//! up, another thread's stack joined to the part of R's main thread's
//! stack that started its work.

use super::names::{
    is_interpreter, is_libc, is_loop, is_runtime, is_thread_start_library, loop_label, native_label,
};
use super::processes::{dispatch_at, own_kept, parent_from, Item};
use crate::debuginfo::Resolved;
use crate::modules::ModuleMap;
use crate::profile::collect::Finished;
use crate::profile::labels::{self, Labels};
use crate::profile::model::{FrameKind, Function, Line, Location, Module};
use crate::profile::record::{Entry, Origin, Owner};
use crate::symbolizer;
use std::collections::HashMap;
use std::sync::Arc;

/// What is known of the R call that started another thread (see
/// `collect`), against R's innermost call when the thread was sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Started {
    /// Not known: the thread was started before the profile, by a thread
    /// started before it, or not through `pthread_create`.
    Unknown,
    /// By this call.
    Here,
    /// By another call (over since, or an outer one).
    Elsewhere,
}

impl Started {
    /// From the marker `collect` put after the thread's own entries.
    fn of_marker(entry: u64) -> Option<Started> {
        let markers = [
            (labels::THREAD, Started::Unknown),
            (labels::THREAD_HERE, Started::Here),
            (labels::THREAD_ELSEWHERE, Started::Elsewhere),
        ];
        markers.into_iter().find(|&(l, _)| entry == Entry::r(l)).map(|(_, s)| s)
    }
}

/// Where the main thread's part of another thread's stack begins: an index
/// into the main thread's native frames under its innermost R frame
/// (`bases`, their modules, innermost first; the frames from the index on
/// are kept, then its R frames), given the module the other thread started
/// in (`entry`), for a thread started through a C++ library's
/// `std::thread` the module of its callable (`callable`), and what is
/// known of the R call that started it (`started`), and whether the main
/// thread was itself starting a thread when sampled (`starting`: winch's
/// hook of `pthread_create()` among its frames). None: the other thread is
/// not shown under the main thread's stack (see `Builder::stack`).
fn parent_cut(
    entry: Option<&str>,
    callable: Option<&str>,
    bases: &[Option<String>],
    started: Started,
    starting: bool,
) -> Option<usize> {
    // R's main thread running R code: no R code is charged with the thread.
    let outer = bases.last()?.as_deref();
    let function_r_called = bases.len() - 1;
    if let Some(entry) = entry {
        // Under the frames outside the runtime's outermost frame (OpenMP's
        // GOMP_parallel, std::thread::join, a library's own wait for the
        // std::threads it started), when the thread did not start in the
        // module R called. A pool started by an earlier call serves this
        // one all the same when this call is in the runtime it started in
        // (OpenMP's), not merely in the module of its callable: the main
        // thread there may only be asking the pool how it is doing (and
        // would be charged with its work in a sample now and then).
        let callable = callable.filter(|_| started != Started::Elsewhere);
        for m in std::iter::once(entry).chain(callable) {
            // The C++ library's frames of a thread being started
            // (`std::thread`'s constructor) are not where this one's work
            // was dispatched, as its `join()` is.
            if starting && is_thread_start_library(m) {
                continue;
            }
            if outer != Some(m) {
                if let Some(j) = bases.iter().rposition(|b| b.as_deref() == Some(m)) {
                    return Some(j + 1);
                }
            }
        }
        // Started in the module R called, directly or through std::thread:
        // under the function R called, unless another call started it (a
        // thread started by an earlier call of the same module, still
        // running, is not this call's work).
        let in_called = outer.is_some() && (outer == Some(entry) || outer == callable);
        if in_called && started != Started::Elsewhere {
            return Some(function_r_called);
        }
    }
    // Started by this very call, whatever the main thread does in it
    // meanwhile (waits on a condition variable, sleeps, computes) and
    // wherever the thread started: under the function R called.
    (started == Started::Here).then_some(function_r_called)
}

/// Whose a stack is: the thread's kernel id (0: R's main thread) and the
/// forked child's pid (0: the profiled process).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sampled {
    pub thread: u32,
    pub process: u32,
}

/// An R location: its label, the R function a loop belongs to, and its
/// position (file label, line).
type RKey = (u32, Option<u32>, Option<(u32, u32)>);

pub(super) struct Builder<'a> {
    labels: &'a Labels,
    fin: &'a Finished,
    pub(super) functions: Vec<Function>,
    function_ids: HashMap<(FrameKind, String, Option<usize>), usize>,
    pub(super) locations: Vec<Location>,
    /// By (snapshot word, entry).
    native_ids: HashMap<(Option<Origin>, u64), usize>,
    /// The modules loaded now: native addresses are named through them.
    now: Arc<ModuleMap>,
    /// Each snapshot's modules, by number.
    pub(super) maps: Vec<&'a ModuleMap>,
    r_ids: HashMap<RKey, usize>,
    pub(super) files: Vec<String>,
    file_ids: HashMap<Arc<str>, usize>,
    pub(super) modules: Vec<Module>,
    /// By (snapshot number, module index in it); and each profile module's
    /// first (snapshot number, module index), to find a load seen before.
    module_ids: HashMap<(usize, usize), usize>,
    module_loads: Vec<(usize, usize)>,
    /// `[thread N]` and `[wait]` locations, by function.
    markers: HashMap<usize, usize>,
    /// Whether a native entry of R's library is its interpreter's.
    interpreter_ids: HashMap<(Option<Origin>, u64), bool>,
    /// The basename of winch's own module (where hooked threads start).
    launch_module: Option<String>,
    pub(super) labels_full: bool,
}

impl<'a> Builder<'a> {
    pub(super) fn new(labels: &'a Labels, fin: &'a Finished) -> Builder<'a> {
        Builder {
            labels,
            fin,
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            native_ids: HashMap::new(),
            now: fin.modules_now.clone().unwrap_or_else(crate::modules::current),
            maps: fin.snapshots.iter().map(|s| &*s.map).collect(),
            r_ids: HashMap::new(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            modules: Vec::new(),
            module_ids: HashMap::new(),
            module_loads: Vec::new(),
            markers: HashMap::new(),
            interpreter_ids: HashMap::new(),
            launch_module: fin.launch_module.clone(),
            labels_full: false,
        }
    }

    /// The locations of a stack's entries, innermost first, and the
    /// thread it is a sample of (0: R's main thread). Another thread's
    /// stack is its own native frames (the C library's thread start left
    /// out), `[thread N]`, and, when it joined a sample of R's main thread
    /// (see `collect`), that sample's frames from where the thread's work
    /// was started: the main thread's native frames under its innermost R
    /// frame down to the call into the runtime that runs the thread (the
    /// outermost frame in the module of the thread's start routine: for
    /// OpenMP the function calling `GOMP_parallel`), or, when the thread
    /// starts in the module R called, the function R called. When the main
    /// thread was running R code, or nothing on its native stack belongs to
    /// the thread's runtime (a pool's thread working after its region
    /// ended), the thread's frames stay at the root.
    /// A stack with no frame at all (nothing readable, not even where the
    /// thread was) is `[no frames]`: the sample counts, never as an empty
    /// stack.
    /// A sample that stands for the kernel's time (its first entry after
    /// the origin, see `capture::kernel`) has `[kernel]` innermost, under
    /// the frames of where the thread was.
    pub(super) fn stack(&mut self, entries: &[u64]) -> (Vec<usize>, Sampled) {
        let kernel = entries.get(1) == Some(&Entry::r(labels::KERNEL));
        let (mut out, who) = if kernel {
            let rest: Vec<u64> = entries[..1].iter().chain(&entries[2..]).copied().collect();
            self.frames(&rest)
        } else {
            self.frames(entries)
        };
        if kernel {
            let f = self.function(FrameKind::Kernel, "[kernel]".into(), "[kernel]".into(), None);
            out.insert(0, self.marker_location(f));
        }
        if out.is_empty() {
            let f = self.function(FrameKind::NoFrames, "[no frames]".into(), "[no_frames]".into(), None);
            out.push(self.marker_location(f));
        }
        (out, who)
    }

    fn frames(&mut self, entries: &[u64]) -> (Vec<usize>, Sampled) {
        if let Some(o) = entries.first().and_then(|&w| Origin::decode(w)).filter(|o| o.process) {
            return (self.process_stack(&entries[1..], o), Sampled { thread: 0, process: o.tid });
        }
        let mut out = Vec::with_capacity(entries.len() + 2);
        let Some(t) = entries.iter().position(|&e| Started::of_marker(e).is_some()) else {
            let snap = entries.first().and_then(|&w| Origin::decode(w));
            let rest = entries.get(1..).unwrap_or(&[]);
            let inner = rest.iter().take_while(|&&e| Entry::is_native(e)).count();
            self.wait_marker(&rest[..inner], snap, &mut out);
            self.entries(rest, snap, &mut out);
            return (out, Sampled::default());
        };
        let origin = Origin::decode(entries[0]);
        let tid = origin.map_or(0, |o| o.tid);
        let snap = origin.map(Origin::without_thread);
        // The thread's own frames, its start's plumbing left out: the C
        // library's, and winch's own start of threads it saw start.
        let mut own = &entries[1..t];
        let launch = self.launch_module.clone();
        while let Some((&last, head)) = own.split_last() {
            let base = self.module_base(last, snap);
            let plumbing = base.as_deref().is_some_and(is_libc) || (base.is_some() && base == launch);
            if plumbing && !head.is_empty() {
                own = head;
            } else {
                break;
            }
        }
        let entry_module = own.last().and_then(|&e| self.module_base(e, snap));
        // A C++ library's thread start calls the thread's callable: its
        // module is the first one further in.
        let callable = match entry_module.as_deref() {
            Some(m) if is_thread_start_library(m) => own
                .iter()
                .rev()
                .map(|&e| self.module_base(e, snap))
                .find(|b| b.as_deref() != Some(m))
                .flatten(),
            _ => None,
        };
        self.wait_marker(own, snap, &mut out);
        self.entries(own, snap, &mut out);
        out.push(self.thread_location(tid));
        let parent = &entries[t + 1..];
        if let Some((&pword, rest)) = parent.split_first() {
            let psnap = Origin::decode(pword);
            // (Where R's main thread was is what counts, not whether its
            // sample was the kernel's.)
            let rest = rest.strip_prefix(&[Entry::r(labels::KERNEL)]).unwrap_or(rest);
            let inner = rest.iter().take_while(|&&e| Entry::is_native(e)).count();
            let bases: Vec<Option<String>> =
                rest[..inner].iter().map(|&e| self.module_base(e, psnap)).collect();
            let started = Started::of_marker(entries[t]).unwrap_or(Started::Unknown);
            let starting = launch.is_some() && bases.contains(&launch);
            if let Some(from) =
                parent_cut(entry_module.as_deref(), callable.as_deref(), &bases, started, starting)
            {
                self.entries(&rest[from..], psnap, &mut out);
            }
        }
        (out, Sampled { thread: tid, process: 0 })
    }

    /// Whether a native entry is a frame of R's interpreter, left out (its
    /// R frames stand for it): in R's library (kept in samples only with
    /// `libr = TRUE`), and unnamed or one of the interpreter's functions.
    fn interpreter_frame(&mut self, entry: u64, snap: Option<Origin>) -> bool {
        let Entry::Native { ip, exact } = Entry::decode(entry) else { return false };
        let probe = Entry::probe(ip, exact);
        let now = self.now_of(snap);
        let place = placement(&self.maps, &now, snap, probe);
        let (Place::Loaded { snap: k, index, .. } | Place::Unloaded { snap: k, index }) = place else {
            return false;
        };
        if self.fin.snapshots[k].libr != Some(index) {
            return false;
        }
        if let Some(&known) = self.interpreter_ids.get(&(snap, entry)) {
            return known;
        }
        // Named, and not one of the interpreter's functions (the function a
        // frame's code belongs to is the last of its inlined calls).
        let named = match place {
            Place::Loaded { now: j, .. } => {
                let bias = now.module(j).bias;
                symbolizer::with_global(|s| s.resolve_in(&now, j, probe.wrapping_sub(bias) as u64))
                    .and_then(|r| r.last().and_then(|x| x.func.as_ref().map(|f| f.to_string())))
            }
            _ => None,
        };
        let interp = named.is_none_or(|name| is_interpreter(&name));
        self.interpreter_ids.insert((snap, entry), interp);
        interp
    }

    /// The modules loaded now in the process snapshot `snap` is of: this
    /// one's (or the recorded process's), or a worker's read from outside
    /// (see `Finished::elsewhere`).
    fn now_of(&self, snap: Option<Origin>) -> Arc<ModuleMap> {
        let k = snap.map(|o| o.snapshot as usize);
        k.and_then(|k| self.fin.elsewhere.iter().find(|(r, _)| r.contains(&k)))
            .map_or_else(|| self.now.clone(), |(_, m)| m.clone())
    }

    /// The basename of the module a native entry's address is in.
    fn module_base(&self, entry: u64, snap: Option<Origin>) -> Option<String> {
        let Entry::Native { ip, exact } = Entry::decode(entry) else { return None };
        let probe = Entry::probe(ip, exact);
        match placement(&self.maps, &self.now_of(snap), snap, probe) {
            Place::Loaded { snap, index, .. } | Place::Unloaded { snap, index } => {
                Some(self.maps[snap].module(index).basename().to_string())
            }
            Place::Unknown => None,
        }
    }

    /// `[wait]` first, when a thread's innermost native frames (system
    /// calls of the C library aside) are a parallel runtime's own.
    fn wait_marker(&mut self, natives: &[u64], snap: Option<Origin>, out: &mut Vec<usize>) {
        let first =
            natives.iter().map(|&e| self.module_base(e, snap)).find(|b| !b.as_deref().is_some_and(is_libc));
        if first.flatten().is_some_and(|b| is_runtime(&b)) {
            let f = self.function(FrameKind::Wait, "[wait]".into(), "[wait]".into(), None);
            out.push(self.marker_location(f));
        }
    }

    /// The locations of another process's stack (its entries after the
    /// origin `o`): its own frames (the framework's plumbing left out),
    /// `[process N]`, and the frames that dispatched the work (see
    /// `processes`): a forked child's parent's at the fork, or a worker's
    /// sample joined to R's main thread's, from the main thread's
    /// outermost dispatching call out (none when it was in none).
    fn process_stack(&mut self, entries: &[u64], o: Origin) -> Vec<usize> {
        let snap = Some(o.without_thread());
        let marker = entries.iter().position(|&e| e == Entry::r(labels::PROCESS));
        let (own, parent) = match marker {
            Some(m) => (&entries[..m], &entries[m + 1..]),
            None => (entries, &[][..]),
        };
        let item = |e: u64| match Entry::decode(e) {
            Entry::R { label, .. } => Item::R(self.labels.text(label).to_string()),
            Entry::Pos { .. } => Item::Pos,
            _ => Item::Native,
        };
        let keep = own_kept(|k| item(own[k]), own.len());
        let mut out = Vec::with_capacity(entries.len() + 1);
        self.entries(&own[..keep], snap, &mut out);
        out.push(self.process_location(o.tid));
        match parent.split_first().and_then(|(&w, rest)| Some((Origin::decode(w)?, rest))) {
            // A worker's sample joined to R's main thread's (see `collect`):
            // under its outermost dispatching call, if it is in one (where
            // the main thread was is what counts, not whether its sample
            // was the kernel's).
            Some((psnap, rest)) => {
                let rest = rest.strip_prefix(&[Entry::r(labels::KERNEL)]).unwrap_or(rest);
                if let Some(from) = dispatch_at(|k| item(rest[k]), rest.len()) {
                    self.entries(&rest[from..], Some(psnap), &mut out);
                }
            }
            // A forked child's: its parent's part as it was at the fork.
            None => {
                let from = parent_from(|k| item(parent[k]), parent.len());
                self.entries(&parent[from..], snap, &mut out);
            }
        }
        out
    }

    /// The `[process N]` location of the forked child `pid`.
    fn process_location(&mut self, pid: u32) -> usize {
        let n = self.fin.collected.process_order.iter().position(|&p| p == pid).map_or(0, |i| i + 1);
        let f = self.function(FrameKind::Process, format!("[process {n}]"), format!("[process_{n}]"), None);
        self.marker_location(f)
    }

    /// The `[thread N]` location of the thread with kernel id `tid`.
    fn thread_location(&mut self, tid: u32) -> usize {
        let n = self.fin.collected.thread_order.iter().position(|&t| t == tid).map_or(0, |i| i + 1);
        let f = self.function(FrameKind::Thread, format!("[thread {n}]"), format!("[thread_{n}]"), None);
        self.marker_location(f)
    }

    fn marker_location(&mut self, function: usize) -> usize {
        if let Some(&l) = self.markers.get(&function) {
            return l;
        }
        let l = self.locations.len();
        self.locations.push(Location {
            module: None,
            address: 0,
            lines: vec![Line { function, file: None, line: None }],
        });
        self.markers.insert(function, l);
        l
    }

    /// The locations of entries (native, R and positions; an origin word
    /// changes the snapshot of the native entries after it), innermost
    /// first, appended to `out`.
    fn entries(&mut self, entries: &[u64], snap: Option<Origin>, out: &mut Vec<usize>) {
        let mut snap = snap.map(Origin::without_thread);
        for (k, &e) in entries.iter().enumerate() {
            match Entry::decode(e) {
                Entry::Origin(o) => snap = Some(o.without_thread()),
                Entry::Native { .. } if self.interpreter_frame(e, snap) => {}
                Entry::Native { .. } => out.push(self.native(e, snap)),
                Entry::R { label: id, owner } => {
                    // A loop is named after the R function running it: the
                    // next R frame further out that is not a loop.
                    let owner = match owner {
                        _ if !is_loop(id) => None,
                        Owner::Caller => {
                            entries[k + 1..].iter().filter_map(|&o| Entry::label_of(o)).find(|&o| !is_loop(o))
                        }
                        Owner::TopLevel => None,
                        Owner::Frame(o) => Some(o),
                    };
                    let pos = match entries.get(k + 1).map(|&p| Entry::decode(p)) {
                        Some(Entry::Pos { file, line }) => Some((file, line)),
                        _ => None,
                    };
                    out.push(self.r(id, is_loop(id), owner, pos));
                }
                Entry::Pos { .. } | Entry::Alloc(_) => {}
            }
        }
    }

    fn function(&mut self, kind: FrameKind, name: String, label: String, module: Option<usize>) -> usize {
        let key = (kind, name.clone(), module);
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len();
        self.functions.push(Function { name, label, kind, module, file: None });
        self.function_ids.insert(key, id);
        id
    }

    fn r(&mut self, id: u32, is_loop: bool, owner: Option<u32>, pos: Option<(u32, u32)>) -> usize {
        let key = (id, owner, pos);
        if let Some(&l) = self.r_ids.get(&key) {
            return l;
        }
        self.labels_full |= id == labels::FULL;
        let label = self.labels.text(id).to_string();
        let f = if is_loop {
            // Qualified with the function whose body holds it, so that the
            // loops of different functions stay apart in every format
            // (`glm.fit[for]`); a loop at the top level is `[for]`.
            let owner = owner.map_or("", |o| self.labels.text(o));
            let qualified = loop_label(owner, &label);
            self.function(FrameKind::Loop, qualified.clone(), qualified, None)
        } else {
            self.function(FrameKind::R, label.clone(), label, None)
        };
        let (file, line) = match pos {
            Some((file, line)) => {
                let path: Arc<str> = self.labels.text(file).into();
                (Some(self.file(&path)), Some(line))
            }
            None => (None, None),
        };
        if self.functions[f].file.is_none() {
            self.functions[f].file = file;
        }
        let l = self.locations.len();
        self.locations.push(Location {
            module: None,
            address: 0,
            lines: vec![Line { function: f, file, line }],
        });
        self.r_ids.insert(key, l);
        l
    }

    fn file(&mut self, path: &Arc<str>) -> usize {
        if let Some(&id) = self.file_ids.get(path) {
            return id;
        }
        let id = self.files.len();
        self.files.push(path.to_string());
        self.file_ids.insert(path.clone(), id);
        id
    }

    /// The profile's module for module `index` of snapshot `snap`: one per
    /// load, however many snapshots list it.
    pub(super) fn module(&mut self, snap: usize, index: usize) -> usize {
        if let Some(&id) = self.module_ids.get(&(snap, index)) {
            return id;
        }
        let map = self.maps[snap];
        let seen = self.module_loads.iter().position(|&(s, i)| self.maps[s].same_load(i, map) == Some(index));
        if let Some(id) = seen {
            self.module_ids.insert((snap, index), id);
            return id;
        }
        let m = map.module(index);
        let start = m.segments.iter().map(|s| s.start).min().unwrap_or(m.bias);
        let limit = m.segments.iter().map(|s| s.end).max().unwrap_or(m.bias);
        let id = self.modules.len();
        self.modules.push(Module {
            path: m.path.clone(),
            build_id: m.build_id.as_deref().map(crate::debugfile::hex),
            start: start as u64,
            limit: limit as u64,
            offset: start.wrapping_sub(m.bias) as u64,
        });
        self.module_ids.insert((snap, index), id);
        self.module_loads.push((snap, index));
        id
    }

    /// The location of a native entry of a sample whose snapshot word is
    /// `snap`: one per distinct instruction of a module load.
    fn native(&mut self, entry: u64, snap: Option<Origin>) -> usize {
        if let Some(&l) = self.native_ids.get(&(snap, entry)) {
            return l;
        }
        let (ip, exact) = match Entry::decode(entry) {
            Entry::Native { ip, exact } => (ip, exact),
            _ => (0, true),
        };
        // A return address's call is just before it.
        let probe = Entry::probe(ip, exact);
        let now = self.now_of(snap);
        let place = placement(&self.maps, &now, snap, probe);
        let resolved: Arc<[Resolved]> = match place {
            Place::Loaded { now: j, .. } => {
                let bias = now.module(j).bias;
                symbolizer::with_global(|s| s.resolve_in(&now, j, probe.wrapping_sub(bias) as u64))
                    .unwrap_or_else(unnamed)
            }
            Place::Unloaded { .. } | Place::Unknown => unnamed(),
        };
        let (module, base) = match place {
            Place::Loaded { snap, index, .. } | Place::Unloaded { snap, index } => {
                (Some(self.module(snap, index)), self.maps[snap].module(index).basename().to_string())
            }
            Place::Unknown => (None, "?".to_string()),
        };
        let mut lines = Vec::with_capacity(resolved.len());
        for r in resolved.iter() {
            let (name, label) = match &r.func {
                Some(name) => (name.to_string(), format!("/{base}::{}", native_label(name))),
                None => self.unnamed_function(place, probe, ip),
            };
            let f = self.function(FrameKind::Native, name, label, module);
            let file = r.file.as_ref().map(|p| self.file(p));
            if self.functions[f].file.is_none() {
                self.functions[f].file = file;
            }
            lines.push(Line { function: f, file, line: r.line });
        }
        let l = self.locations.len();
        self.locations.push(Location { module, address: ip as u64, lines });
        self.native_ids.insert((snap, entry), l);
        l
    }

    /// Name and label of an unnamed native function: its start from the
    /// unwind information of the snapshot it was sampled with (copied then:
    /// right also for a module unloaded since), so every sample in it counts
    /// for one function; where no unwind entry covers the address, or the
    /// module is unknown, the address itself, marked with `?` (as in traces:
    /// the offset of `ip` itself, while `probe`, the address looked up, is
    /// inside the call for return addresses).
    fn unnamed_function(&self, place: Place, probe: usize, ip: usize) -> (String, String) {
        let (Place::Loaded { snap, index, .. } | Place::Unloaded { snap, index }) = place else {
            return ("?".into(), format!("/?::{}", crate::view::unnamed_label(None, ip)));
        };
        let module = self.maps[snap].module(index);
        let start = self.fin.snapshots[snap].function_start(probe).map(|s| s.wrapping_sub(module.bias));
        let name = crate::view::unnamed_label(start, ip.wrapping_sub(module.bias));
        (format!("/{}::{name}", module.basename()), format!("/{}::{name}", module.basename()))
    }
}

/// Where a sampled native address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// In module `index` of snapshot `snap`, which is loaded now as module
    /// `now` of the current map.
    Loaded { snap: usize, index: usize, now: usize },
    /// In module `index` of snapshot `snap`, no longer loaded.
    Unloaded { snap: usize, index: usize },
    /// Not known for certain: in no module of its snapshot, or sampled
    /// while modules changed (`UNCERTAIN`), or with an unknown snapshot.
    Unknown,
}

/// Where the address `probe` of a sample of origin `snap` was, given every
/// snapshot's modules (`maps`, by number) and the modules loaded now.
fn placement(maps: &[&ModuleMap], now: &ModuleMap, snap: Option<Origin>, probe: usize) -> Place {
    let Some(origin) = snap.filter(|o| !o.uncertain) else { return Place::Unknown };
    let k = origin.snapshot as usize;
    let Some(map) = maps.get(k) else { return Place::Unknown };
    let Some(index) = map.module_of(probe) else { return Place::Unknown };
    match map.same_load(index, now) {
        Some(j) => Place::Loaded { snap: k, index, now: j },
        None => Place::Unloaded { snap: k, index },
    }
}

fn unnamed() -> Arc<[Resolved]> {
    Arc::from(vec![Resolved::unnamed()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_placed_with_the_modules_of_their_snapshot() {
        use crate::modules::Module;
        let libr = Module::synthetic("/usr/lib/R/lib/libR.so", 0x100000, 0x200000, false);
        let a = Module::synthetic("/tmp/x/rela.so", 0x10000, 0x11000, false);
        let b = Module::synthetic("/tmp/y/relb.so", 0x10000, 0x11000, false);
        // Snapshot 0 while rela.so was loaded, 1 after relb.so replaced it;
        // relb.so is still loaded now.
        let s0 = ModuleMap::new(vec![libr.clone(), a]);
        let s1 = ModuleMap::new(vec![b.clone(), libr.clone()]);
        let now = ModuleMap::new(vec![libr, b]);
        let maps = [&s0, &s1];
        let word = |n: u32| Some(Origin::main(n));
        assert_eq!(placement(&maps, &now, word(0), 0x10100), Place::Unloaded { snap: 0, index: 1 });
        assert_eq!(placement(&maps, &now, word(1), 0x10100), Place::Loaded { snap: 1, index: 0, now: 1 });
        assert_eq!(placement(&maps, &now, word(0), 0x100100), Place::Loaded { snap: 0, index: 0, now: 0 });
        // Taken while modules changed, with an unknown snapshot, or in no
        // module: unknown.
        assert_eq!(placement(&maps, &now, word(1).map(|o| o.marked(true)), 0x10100), Place::Unknown);
        assert_eq!(placement(&maps, &now, word(2), 0x10100), Place::Unknown);
        assert_eq!(placement(&maps, &now, Origin::decode(Entry::native(1, false)), 0x10100), Place::Unknown);
        assert_eq!(placement(&maps, &now, word(0), 0x5), Place::Unknown);
    }

    /// A finished session with nothing in it (no snapshots, no modules).
    fn empty_finished() -> Finished {
        Finished {
            collected: Default::default(),
            labels: Labels::new(),
            snapshots: Vec::new(),
            handler_runs: 0,
            dropped: 0,
            outside: 0,
            duration_ns: 0,
            started: std::time::SystemTime::UNIX_EPOCH,
            all_threads: false,
            threads: Vec::new(),
            main_tid: 1,
            main_name: String::new(),
            main_cpu_ns: 0,
            collector_cpu_ns: None,
            relatives: Vec::new(),
            elsewhere: Vec::new(),
            thread_dropped: 0,
            forked: 0,
            alloc: None,
            modules_now: Some(Arc::new(ModuleMap::new(Vec::new()))),
            pid: 1,
            command: String::new(),
            launch_module: None,
        }
    }

    #[test]
    fn a_sample_without_frames_is_labelled_not_empty() {
        let fin = empty_finished();
        let labels = Labels::new();
        let mut b = Builder::new(&labels, &fin);
        // R's main thread's sample: its origin word, nothing after it.
        let (locations, who) = b.stack(&[Origin::main(0).encode()]);
        assert_eq!(who, Sampled::default());
        assert_eq!(locations.len(), 1);
        let line = &b.locations[locations[0]].lines[0];
        let f = &b.functions[line.function];
        assert_eq!((f.kind, f.name.as_str()), (FrameKind::NoFrames, "[no frames]"));
        // The same location for every such sample.
        assert_eq!(b.stack(&[Origin::main(0).encode()]).0, locations);
    }

    #[test]
    fn a_kernel_sample_has_kernel_innermost_and_a_thread_s_parent_part_never_has_it() {
        let fin = empty_finished();
        let labels = Labels::new();
        let mut b = Builder::new(&labels, &fin);
        let kinds = |b: &Builder, locs: &[usize]| -> Vec<FrameKind> {
            locs.iter().map(|&l| b.functions[b.locations[l].lines[0].function].kind).collect()
        };
        let kernel = Entry::r(labels::KERNEL);
        let anon = Entry::r(labels::ANONYMOUS);
        // R's main thread in the kernel, under an R call.
        let (main, _) = b.stack(&[Origin::main(0).encode(), kernel, anon]);
        assert_eq!(kinds(&b, &main), [FrameKind::Kernel, FrameKind::R]);
        let f = &b.functions[b.locations[main[0]].lines[0].function];
        assert_eq!((f.name.as_str(), f.label.as_str()), ("[kernel]", "[kernel]"));
        // A thread started by the running call, in the kernel too, joined
        // to a main thread's sample that was the kernel's: `[kernel]`
        // innermost once, the main thread's frames after `[thread N]`.
        let thread = [
            Origin::thread(0, 5).encode(),
            kernel,
            Entry::r(labels::THREAD_HERE),
            Origin::main(0).encode(),
            kernel,
            Entry::native(0x5, false),
            anon,
        ];
        let (locs, who) = b.stack(&thread);
        assert_eq!(who.thread, 5);
        assert_eq!(kinds(&b, &locs), [FrameKind::Kernel, FrameKind::Thread, FrameKind::Native, FrameKind::R]);
    }

    #[test]
    fn another_threads_stack_hangs_under_the_call_that_started_its_work() {
        let b = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        // OpenMP: the main thread in user.so -> libgomp (GOMP_parallel) ->
        // user.so (the region) -> libgomp (barrier); the worker started in
        // libgomp: kept from the caller of the outermost libgomp frame.
        let main = b(&["libgomp.so.1", "user.so", "libgomp.so.1", "user.so"]);
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &main, Started::Unknown, false), Some(3));
        // A pool started by an earlier call serves this one all the same.
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &main, Started::Elsewhere, false), Some(3));
        // A thread started directly by the module R called, the main thread
        // waiting in the C library: under the function R called.
        let joined = b(&["libc.so.6", "libc.so.6", "user.so", "user.so"]);
        assert_eq!(parent_cut(Some("user.so"), None, &joined, Started::Unknown, false), Some(3));
        // ... unless an earlier call started it (a detached thread still
        // running while R calls the module again).
        assert_eq!(parent_cut(Some("user.so"), None, &joined, Started::Elsewhere, false), None);
        // std::thread: started in libstdc++, joined through it.
        let cxx = b(&["libc.so.6", "libstdc++.so.6", "user.so"]);
        assert_eq!(parent_cut(Some("libstdc++.so.6"), None, &cxx, Started::Unknown, false), Some(2));
        // Nothing of the runtime on the main thread's stack (a pool's thread
        // after its region), R code running (no native frames), or a thread
        // whose start is unknown: at the root.
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &b(&["other.so"]), Started::Unknown, false), None);
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &[], Started::Unknown, false), None);
        assert_eq!(parent_cut(None, None, &main, Started::Unknown, false), None);
    }

    #[test]
    fn a_std_thread_hangs_under_the_call_whose_module_holds_its_callable() {
        let b = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        let cxx = Some("libstdc++.so.6");
        // ranger: std::threads started in the module R called (their
        // callable in it), R's main thread waiting on a condition variable
        // (its wait inlined: no libstdc++ frame), sleeping, or computing:
        // under the function R called.
        let waits = b(&["libc.so.6", "user.so", "user.so", "user.so"]);
        assert_eq!(parent_cut(cxx, Some("user.so"), &waits, Started::Unknown, false), Some(3));
        let computes = b(&["user.so", "user.so"]);
        assert_eq!(parent_cut(cxx, Some("user.so"), &computes, Started::Unknown, false), Some(1));
        // Joined through libstdc++ (std::thread::join): from the caller of
        // its outermost frame, as before.
        let joins = b(&["libc.so.6", "libstdc++.so.6", "user.so", "user.so"]);
        assert_eq!(parent_cut(cxx, Some("user.so"), &joins, Started::Unknown, false), Some(2));
        // Starting the next std::thread (inside its constructor, through
        // winch's hook of pthread_create): not a wait in libstdc++; under
        // the function R called when this call started it, else at the root.
        let starts = b(&["libc.so.6", "libwinch.so", "libstdc++.so.6", "user.so", "user.so"]);
        assert_eq!(parent_cut(cxx, Some("user.so"), &starts, Started::Here, true), Some(4));
        assert_eq!(parent_cut(cxx, Some("user.so"), &starts, Started::Elsewhere, true), None);
        // (OpenMP's team start is not affected: GOMP_parallel's caller.)
        let team = b(&["libc.so.6", "libwinch.so", "libgomp.so.1", "libgomp.so.1", "user.so"]);
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &team, Started::Unknown, true), Some(4));
        // Started by an earlier call (a detached std::thread still running
        // while R calls the module again): at the root.
        assert_eq!(parent_cut(cxx, Some("user.so"), &waits, Started::Elsewhere, false), None);
        // A library R's call went through started them (their callable in
        // it) and waits for them in its own code: from the caller of its
        // outermost frame.
        let library = b(&["libc.so.6", "libarrow.so", "libarrow.so", "user.so"]);
        assert_eq!(parent_cut(cxx, Some("libarrow.so"), &library, Started::Unknown, false), Some(3));
        // ... but not when an earlier call, over since, started them: the
        // main thread may be only polling the library (a pool started by
        // an earlier .Call, a later one asking it whether it is done).
        assert_eq!(parent_cut(cxx, Some("libarrow.so"), &library, Started::Elsewhere, false), None);
        // Where they were started is not known, the callable is in another
        // module than any on the main thread's stack, R code runs, or the
        // callable is unknown: at the root.
        assert_eq!(parent_cut(cxx, Some("other.so"), &waits, Started::Unknown, false), None);
        assert_eq!(parent_cut(cxx, Some("user.so"), &[], Started::Unknown, false), None);
        assert_eq!(parent_cut(cxx, None, &waits, Started::Unknown, false), None);
        let unknown_outer = vec![Some("libc.so.6".to_string()), None];
        assert_eq!(parent_cut(cxx, None, &unknown_outer, Started::Unknown, false), None);
    }

    #[test]
    fn a_thread_started_by_the_running_call_hangs_under_it_whatever_the_main_thread_does() {
        let b = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        // Started by this call through a library (its thread start and
        // callable in libfoo.so), the main thread back in the module R
        // called, computing or waiting on its own condition variable:
        // under the function R called.
        let computes = b(&["user.so", "user.so", "user.so"]);
        assert_eq!(parent_cut(Some("libfoo.so"), None, &computes, Started::Here, false), Some(2));
        let waits = b(&["libc.so.6", "user.so"]);
        assert_eq!(
            parent_cut(Some("libstdc++.so.6"), Some("libfoo.so"), &waits, Started::Here, false),
            Some(1)
        );
        // Its start not known: the same.
        assert_eq!(parent_cut(None, None, &waits, Started::Here, false), Some(1));
        // The runtime on the main thread's stack still says where the work
        // was started from.
        let omp = b(&["libgomp.so.1", "user.so", "user.so"]);
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &omp, Started::Here, false), Some(1));
        // A pool this call created, still spinning after its region while
        // the call goes on computing: the call's (a pool created before the
        // call is at the root then).
        let after = b(&["user.so", "user.so"]);
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &after, Started::Here, false), Some(1));
        assert_eq!(parent_cut(Some("libgomp.so.1"), None, &after, Started::Unknown, false), None);
        // The same thread sampled while another call runs (the starting
        // call is over, or called back into R), or while R code of the
        // starting call runs: at the root.
        assert_eq!(parent_cut(Some("libfoo.so"), None, &computes, Started::Elsewhere, false), None);
        assert_eq!(parent_cut(Some("libfoo.so"), None, &computes, Started::Unknown, false), None);
        assert_eq!(parent_cut(Some("libfoo.so"), None, &[], Started::Here, false), None);
    }

    #[test]
    fn thread_markers_say_what_is_known_of_the_starting_call() {
        assert_eq!(Started::of_marker(Entry::r(labels::THREAD)), Some(Started::Unknown));
        assert_eq!(Started::of_marker(Entry::r(labels::THREAD_HERE)), Some(Started::Here));
        assert_eq!(Started::of_marker(Entry::r(labels::THREAD_ELSEWHERE)), Some(Started::Elsewhere));
        assert_eq!(Started::of_marker(Entry::r(labels::GC)), None);
        assert_eq!(Started::of_marker(Entry::native(0x1000, false)), None);
    }
}
