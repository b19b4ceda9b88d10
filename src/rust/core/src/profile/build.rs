//! From a finished session to a [`Profile`]: native addresses symbolized
//! (with inlined calls), unnamed native functions identified by their start
//! from the unwind information, R labels looked up, loops named after the
//! function running them.

use super::collect::Times;
use super::labels::{self, Labels};
use super::model::{Event, FrameKind, Function, Line, Location, Module, Profile, Stack};
use super::sampler::{EXACT_IP, IP_MASK, NATIVE, POS, R, TAG};
use super::session::Finished;
use crate::debuginfo::Resolved;
use crate::symbolizer;
use std::collections::HashMap;
use std::sync::Arc;

/// Figures about the run, for `summary()`.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Handler runs, and the timer intervals they stand for.
    pub samples: u64,
    pub weight: u64,
    /// Samples whose native stack or context chain was not read whole.
    pub truncated: u64,
    /// Intervals lost because the ring was full.
    pub dropped: u64,
    /// Intervals whose sample was the profiler's own (starting or
    /// stopping), left out.
    pub outside: u64,
    pub distinct_stacks: usize,
    /// Time spent in the handler.
    pub handler_total_ns: u64,
    pub handler_median_ns: u64,
    pub handler_p99_ns: u64,
    /// Frames whose R label did not fit in the label table.
    pub labels_full: bool,
    /// Heap bytes held by the collected stacks at the end.
    pub stack_bytes: usize,
}

/// Builds the profile.
pub fn build(f: &Finished, event: Event, interval_ns: u64) -> (Profile, Stats) {
    symbolizer::with_global(|s| s.start_capture());
    let mut b = Builder::new(&f.labels, f);
    let mut stacks: Vec<Stack> = f
        .collected
        .stacks
        .iter()
        .map(|(entries, counts)| Stack { locations: b.stack(entries), count: counts.weight })
        .collect();
    // Heaviest first: readers that stop early see what matters.
    stacks.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.locations.cmp(&b.locations)));
    let start_unix_ns =
        f.started.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let c = &f.collected;
    let stats = Stats {
        samples: c.samples,
        weight: c.weight,
        truncated: c.truncated,
        dropped: f.dropped,
        outside: f.outside,
        distinct_stacks: c.stacks.len(),
        handler_total_ns: c.times.total_ns,
        handler_median_ns: quantile(&c.times, 0.5),
        handler_p99_ns: quantile(&c.times, 0.99),
        labels_full: b.labels_full,
        stack_bytes: c.heap_bytes(),
    };
    let profile = Profile {
        event,
        interval_ns,
        start_unix_ns,
        duration_ns: f.duration_ns,
        functions: b.functions,
        locations: b.locations,
        stacks,
        files: b.files,
        modules: b.modules,
    };
    (profile, stats)
}

fn quantile(t: &Times, q: f64) -> u64 {
    t.quantile(q).unwrap_or(0)
}

/// An R location: its label, the R function a loop belongs to, and its
/// position (file label, line).
type RKey = (u32, Option<u32>, Option<(u32, u32)>);

struct Builder<'a> {
    labels: &'a Labels,
    fin: &'a Finished,
    functions: Vec<Function>,
    function_ids: HashMap<(FrameKind, String, Option<usize>), usize>,
    locations: Vec<Location>,
    native_ids: HashMap<u64, usize>,
    r_ids: HashMap<RKey, usize>,
    files: Vec<String>,
    file_ids: HashMap<Arc<str>, usize>,
    modules: Vec<Module>,
    module_ids: HashMap<usize, usize>,
    labels_full: bool,
}

impl<'a> Builder<'a> {
    fn new(labels: &'a Labels, fin: &'a Finished) -> Builder<'a> {
        Builder {
            labels,
            fin,
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            native_ids: HashMap::new(),
            r_ids: HashMap::new(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            modules: Vec::new(),
            module_ids: HashMap::new(),
            labels_full: false,
        }
    }

    /// The locations of a record's entries, innermost first.
    fn stack(&mut self, entries: &[u64]) -> Vec<usize> {
        let mut out = Vec::with_capacity(entries.len());
        for (k, &e) in entries.iter().enumerate() {
            match e & TAG {
                NATIVE => out.push(self.native(e)),
                R => {
                    let id = (e & 0xffff_ffff) as u32;
                    // A loop is named after the R function running it: the
                    // next R frame further out that is not a loop.
                    let owner = if is_loop(id) {
                        entries[k + 1..]
                            .iter()
                            .filter(|&&o| o & TAG == R)
                            .map(|&o| (o & 0xffff_ffff) as u32)
                            .find(|&o| !is_loop(o))
                    } else {
                        None
                    };
                    let pos = entries
                        .get(k + 1)
                        .filter(|&&p| p & TAG == POS)
                        .map(|&p| (((p & !TAG) >> 32) as u32, (p & 0xffff_ffff) as u32));
                    out.push(self.r(id, is_loop(id), owner, pos));
                }
                _ => {}
            }
        }
        out
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
            let owner = owner.map_or("<top level>", |o| self.labels.text(o)).to_string();
            self.function(FrameKind::Loop, format!("{owner} {label}"), label, None)
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

    fn module(&mut self, index: usize) -> usize {
        if let Some(&id) = self.module_ids.get(&index) {
            return id;
        }
        let m = self.fin.snapshot.map.module(index);
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
        self.module_ids.insert(index, id);
        id
    }

    /// The location of a native entry: one per distinct instruction.
    fn native(&mut self, entry: u64) -> usize {
        if let Some(&l) = self.native_ids.get(&entry) {
            return l;
        }
        let ip = (entry & IP_MASK) as usize;
        // A return address's call is just before it.
        let probe = if entry & EXACT_IP != 0 { ip } else { ip.wrapping_sub(1) };
        let map = self.fin.snapshot.map.clone();
        let index = map.module_of(probe);
        let resolved: Arc<[Resolved]> = match index {
            Some(m) => symbolizer::with_global(|s| {
                s.resolve_in(&map, m, probe.wrapping_sub(map.module(m).bias) as u64)
            })
            .unwrap_or_else(unnamed),
            None => unnamed(),
        };
        let module = index.map(|m| self.module(m));
        let base = index.map_or("?".to_string(), |m| map.module(m).basename().to_string());
        let mut lines = Vec::with_capacity(resolved.len());
        for r in resolved.iter() {
            let (name, label) = match &r.func {
                Some(name) => (name.to_string(), format!("/{base}::{}", native_label(name))),
                None => self.unnamed_function(index, probe, ip),
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
        self.native_ids.insert(entry, l);
        l
    }

    /// Name and label of an unnamed native function: its start from the
    /// unwind information, so every sample in it counts for one function;
    /// where no unwind entry covers the address, the address itself, marked
    /// with `?` (as in traces: the offset of `ip` itself, while `probe`,
    /// the address looked up, is inside the call for return addresses).
    fn unnamed_function(&self, index: Option<usize>, probe: usize, ip: usize) -> (String, String) {
        let map = &self.fin.snapshot.map;
        let Some(m) = index else {
            return ("?".into(), format!("/?::{}", crate::view::unnamed_label(None, ip)));
        };
        let module = map.module(m);
        let start = self.fin.snapshot.function_start(probe).map(|s| s.wrapping_sub(module.bias));
        let name = crate::view::unnamed_label(start, ip.wrapping_sub(module.bias));
        (format!("/{}::{name}", module.basename()), format!("/{}::{name}", module.basename()))
    }
}

fn is_loop(label: u32) -> bool {
    matches!(label, labels::FOR | labels::WHILE | labels::REPEAT | labels::LOOP)
}

fn unnamed() -> Arc<[Resolved]> {
    Arc::from(vec![Resolved::unnamed()])
}

/// A native function's name as an Rprof label: without its parameter list
/// (a C++ name's trailing `(...)`, and what follows it, such as `const`),
/// and without spaces (`std::vector<int, std::allocator<int> >` becomes
/// `std::vector<int,std::allocator<int>>`; any other space `_`).
pub fn native_label(name: &str) -> String {
    let base = strip_parameters(name);
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

/// `name` without a trailing parameter list: the last top-level `(...)`
/// group that is not part of the name itself (`operator()` and
/// `(anonymous namespace)` are kept).
fn strip_parameters(name: &str) -> &str {
    let bytes = name.as_bytes();
    // Find the opening paren that matches the last closing one, scanning
    // from the end, ignoring what a template's angle brackets enclose.
    let Some(close) = name.rfind(')') else { return name };
    let mut depth = 0i32;
    let mut open = None;
    for i in (0..=close).rev() {
        match bytes[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(open) = open else { return name };
    let head = &name[..open];
    if head.is_empty()
        || head.ends_with("operator")
        || head.ends_with("::")
        || &name[open..=close] == "(anonymous namespace)"
    {
        return name;
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

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
