//! pprof's `profile.proto` (google/pprof, `proto/profile.proto`), gzipped,
//! as `go tool pprof` reads it.
//!
//! The model is already pprof's (see model.rs), so the mapping is one to
//! one: every model function, location and module becomes a pprof
//! function, location and mapping whose id is its index + 1 (pprof ids must
//! be non-zero), every stack with samples a sample. The protobuf encoding is
//! written by hand: the format needs only varints and length-delimited
//! fields.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;

use super::model::{Event, Function, Location, Module, Profile, Stack};

/// Field numbers of `profile.proto`, by message.
mod field {
    pub mod profile {
        pub const SAMPLE_TYPE: u32 = 1;
        pub const SAMPLE: u32 = 2;
        pub const MAPPING: u32 = 3;
        pub const LOCATION: u32 = 4;
        pub const FUNCTION: u32 = 5;
        pub const STRING_TABLE: u32 = 6;
        pub const TIME_NANOS: u32 = 9;
        pub const DURATION_NANOS: u32 = 10;
        pub const PERIOD_TYPE: u32 = 11;
        pub const PERIOD: u32 = 12;
        pub const COMMENT: u32 = 13;
        pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    }
    pub mod value_type {
        pub const TYPE: u32 = 1;
        pub const UNIT: u32 = 2;
    }
    pub mod sample {
        pub const LOCATION_ID: u32 = 1;
        pub const VALUE: u32 = 2;
        pub const LABEL: u32 = 3;
    }
    pub mod label {
        pub const KEY: u32 = 1;
        pub const STR: u32 = 2;
        pub const NUM: u32 = 3;
    }
    pub mod mapping {
        pub const ID: u32 = 1;
        pub const MEMORY_START: u32 = 2;
        pub const MEMORY_LIMIT: u32 = 3;
        pub const FILE_OFFSET: u32 = 4;
        pub const FILENAME: u32 = 5;
        pub const BUILD_ID: u32 = 6;
        pub const HAS_FUNCTIONS: u32 = 7;
        pub const HAS_FILENAMES: u32 = 8;
        pub const HAS_LINE_NUMBERS: u32 = 9;
        pub const HAS_INLINE_FRAMES: u32 = 10;
    }
    pub mod location {
        pub const ID: u32 = 1;
        pub const MAPPING_ID: u32 = 2;
        pub const ADDRESS: u32 = 3;
        pub const LINE: u32 = 4;
    }
    pub mod line {
        pub const FUNCTION_ID: u32 = 1;
        pub const LINE: u32 = 2;
    }
    pub mod function {
        pub const ID: u32 = 1;
        pub const NAME: u32 = 2;
        pub const SYSTEM_NAME: u32 = 3;
        pub const FILENAME: u32 = 4;
    }
}

/// Protobuf wire types.
const VARINT: u64 = 0;
const LEN: u64 = 2;

/// Said in the profile's comment.
const COMMENT: &str = "winch joint R+native profile";

/// The profile as pprof's gzipped `profile.proto`.
pub fn encode(p: &Profile) -> Vec<u8> {
    gzip(&message(p))
}

/// The profile as pprof's `profile.proto`, not yet gzipped.
fn message(p: &Profile) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Message::default();
    // The time type is the last and the default one: what pprof shows. A
    // memory profile has Go's heap profile's four types, the default the
    // bytes still allocated.
    let (time, unit) = time_type(p.event);
    let types: &[(&str, &str)] = if p.event == Event::Alloc {
        &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ]
    } else {
        &[("samples", "count"), (time, unit)]
    };
    let types: Vec<Message> = types.iter().map(|(t, u)| value_type(&mut strings, t, u)).collect();
    for t in &types {
        out.message(field::profile::SAMPLE_TYPE, t);
    }
    // The period: an interval of time, or the mean bytes between samples.
    let time_type = match p.event {
        Event::Alloc => value_type(&mut strings, "space", "bytes"),
        _ => value_type(&mut strings, time, unit),
    };
    // With threads sampled, every sample says which (`-tagfocus`).
    let threads: Vec<(u64, u64, i64)> =
        p.threads.iter().map(|t| (strings.index("thread"), strings.index(&thread_label(t)), t.tid)).collect();
    let tid_key = strings.index("tid");
    // With processes sampled, every sample says which (`process` is `self`
    // or `process N`, `pid` its id).
    let processes: Vec<(u64, u64, i64)> = p
        .processes
        .iter()
        .map(|x| {
            let label = if x.number == 0 { "self".to_string() } else { format!("process {}", x.number) };
            (strings.index("process"), strings.index(&label), x.pid)
        })
        .collect();
    let pid_key = strings.index("pid");
    for stack in p.stacks.iter().filter(|s| s.count > 0) {
        let mut m = sample(stack, p.period);
        if let Some(&(key, value, tid)) = threads.get(stack.thread) {
            let mut l = Message::default();
            l.uint(field::label::KEY, key);
            l.uint(field::label::STR, value);
            m.message(field::sample::LABEL, &l);
            let mut l = Message::default();
            l.uint(field::label::KEY, tid_key);
            l.uint(field::label::NUM, tid.max(0) as u64);
            m.message(field::sample::LABEL, &l);
        }
        if let Some(&(key, value, pid)) = processes.get(stack.process) {
            let mut l = Message::default();
            l.uint(field::label::KEY, key);
            l.uint(field::label::STR, value);
            m.message(field::sample::LABEL, &l);
            let mut l = Message::default();
            l.uint(field::label::KEY, pid_key);
            l.uint(field::label::NUM, pid.max(0) as u64);
            m.message(field::sample::LABEL, &l);
        }
        out.message(field::profile::SAMPLE, &m);
    }
    for (i, m) in p.modules.iter().enumerate() {
        out.message(field::profile::MAPPING, &mapping(&mut strings, i, m));
    }
    for (i, l) in p.locations.iter().enumerate() {
        out.message(field::profile::LOCATION, &location(i, l));
    }
    for (i, f) in p.functions.iter().enumerate() {
        out.message(field::profile::FUNCTION, &function(&mut strings, p, i, f));
    }
    let comment = strings.index(COMMENT);
    let default_type = strings.index(time);
    // Every string is in the table by now.
    for s in &strings.table {
        out.bytes(field::profile::STRING_TABLE, s.as_bytes());
    }
    out.uint(field::profile::TIME_NANOS, p.start_unix_ns);
    out.uint(field::profile::DURATION_NANOS, p.duration_ns);
    out.message(field::profile::PERIOD_TYPE, &time_type);
    out.uint(field::profile::PERIOD, p.period);
    out.uint(field::profile::COMMENT, comment);
    out.uint(field::profile::DEFAULT_SAMPLE_TYPE, default_type);
    out.0
}

/// A thread's `thread` label: `main` for R's main thread, `thread N` for
/// the others, with its name.
pub(crate) fn thread_label(t: &super::model::ThreadInfo) -> String {
    match (t.number, t.name.is_empty()) {
        (0, _) => "main".to_string(),
        (n, true) => format!("thread {n}"),
        (n, false) => format!("thread {n} ({})", t.name),
    }
}

/// The type and unit of what a sample stands for (a memory profile: the
/// bytes still allocated; the period is then the mean bytes between
/// samples, of the bytes allocated).
fn time_type(event: Event) -> (&'static str, &'static str) {
    match event {
        Event::Cpu => ("cpu", "nanoseconds"),
        Event::Elapsed => ("wall", "nanoseconds"),
        Event::Alloc => ("inuse_space", "bytes"),
    }
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Message {
    let mut m = Message::default();
    m.uint(field::value_type::TYPE, strings.index(kind));
    m.uint(field::value_type::UNIT, strings.index(unit));
    m
}

/// A stack's sample: its locations, leaf first as in the model, and its two
/// values (samples, time).
fn sample(stack: &Stack, interval_ns: u64) -> Message {
    let ids: Vec<u64> = stack.locations.iter().map(|&l| id(l)).collect();
    // int64 values: a (never seen) overflow saturates rather than turning
    // negative.
    let time = stack.count.saturating_mul(interval_ns).min(i64::MAX as u64);
    let mut m = Message::default();
    m.packed(field::sample::LOCATION_ID, &ids);
    match stack.bytes {
        Some(b) => {
            let v =
                [b.alloc_count, b.alloc_bytes, b.inuse_count, b.inuse_bytes].map(|x| x.min(i64::MAX as u64));
            m.packed(field::sample::VALUE, &v)
        }
        None => m.packed(field::sample::VALUE, &[stack.count.min(i64::MAX as u64), time]),
    }
    m
}

fn mapping(strings: &mut Strings, i: usize, module: &Module) -> Message {
    let mut m = Message::default();
    m.uint(field::mapping::ID, id(i));
    m.uint(field::mapping::MEMORY_START, module.start);
    m.uint(field::mapping::MEMORY_LIMIT, module.limit);
    m.uint(field::mapping::FILE_OFFSET, module.offset);
    m.uint(field::mapping::FILENAME, strings.index(&module.path));
    m.uint(field::mapping::BUILD_ID, strings.index(module.build_id.as_deref().unwrap_or("")));
    // Symbolized already: without these pprof tries to symbolize again and
    // warns about every mapping it cannot.
    m.bool(field::mapping::HAS_FUNCTIONS, true);
    m.bool(field::mapping::HAS_FILENAMES, true);
    m.bool(field::mapping::HAS_LINE_NUMBERS, true);
    m.bool(field::mapping::HAS_INLINE_FRAMES, true);
    m
}

/// A location; its lines keep the model's order, which is pprof's: inlined
/// calls first, the function they were inlined into last.
fn location(i: usize, l: &Location) -> Message {
    let mut m = Message::default();
    m.uint(field::location::ID, id(i));
    m.uint(field::location::MAPPING_ID, l.module.map_or(0, id));
    m.uint(field::location::ADDRESS, l.address);
    for line in &l.lines {
        let mut lm = Message::default();
        lm.uint(field::line::FUNCTION_ID, id(line.function));
        lm.uint(field::line::LINE, line.line.map_or(0, u64::from));
        m.message(field::location::LINE, &lm);
    }
    m
}

/// A function: named as everywhere else, a C++ function without its
/// parameter list (`ns::f`), with the whole signature as its system name
/// (`ns::f(int) const`). R's frames (and winch's own: loops, `<GC>`,
/// threads) have no system name: pprof rewrites a function whose name is
/// its system name when that looks like C++ (`<Anonymous>` would lose
/// everything between its angle brackets and show as `<unknown>`).
fn function(strings: &mut Strings, p: &Profile, i: usize, f: &Function) -> Message {
    let native = f.kind == super::model::FrameKind::Native;
    let short = if native { super::model::strip_parameters(&f.name) } else { &f.name };
    let name = strings.index(short);
    let system_name = if native { strings.index(&f.name) } else { 0 };
    let mut m = Message::default();
    m.uint(field::function::ID, id(i));
    m.uint(field::function::NAME, name);
    m.uint(field::function::SYSTEM_NAME, system_name);
    m.uint(field::function::FILENAME, f.file.map_or(0, |file| strings.index(&p.files[file])));
    m
}

/// The pprof id of the model's entry at `index`: ids must be non-zero.
fn id(index: usize) -> u64 {
    index as u64 + 1
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut z = GzEncoder::new(Vec::new(), Compression::default());
    z.write_all(data).expect("writing to a Vec cannot fail");
    z.finish().expect("writing to a Vec cannot fail")
}

/// pprof's string table: every string once, `""` first.
struct Strings {
    table: Vec<String>,
    indices: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings { table: Vec::new(), indices: HashMap::new() };
        s.index("");
        s
    }

    fn index(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.indices.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.indices.insert(s.to_string(), i);
        i
    }
}

/// A protobuf message being written. Scalars equal to zero are proto3's
/// defaults and left out.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn key(&mut self, field: u32, wire_type: u64) {
        varint(&mut self.0, (u64::from(field) << 3) | wire_type);
    }

    /// A varint field (uint64, int64 that is not negative, or an index).
    fn uint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.key(field, VARINT);
            varint(&mut self.0, value);
        }
    }

    fn bool(&mut self, field: u32, value: bool) {
        self.uint(field, u64::from(value));
    }

    /// A length-delimited field, written even when empty (an element of a
    /// repeated field, such as the table's first string).
    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.key(field, LEN);
        varint(&mut self.0, data.len() as u64);
        self.0.extend_from_slice(data);
    }

    fn message(&mut self, field: u32, m: &Message) {
        self.bytes(field, &m.0);
    }

    /// A packed repeated varint field.
    fn packed(&mut self, field: u32, values: &[u64]) {
        if values.is_empty() {
            return;
        }
        let mut data = Vec::with_capacity(values.len() * 2);
        for &v in values {
            varint(&mut data, v);
        }
        self.bytes(field, &data);
    }
}

/// Base 128, least significant group first, the high bit marking that more
/// follow.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;
    use crate::profile::model::{FrameKind, Line};

    // --- A small protobuf decoder, independent of the encoder above ---

    /// A field's value: varints and fixed-width numbers as numbers,
    /// length-delimited fields as bytes.
    #[derive(Clone, Debug)]
    enum Value {
        Number(u64),
        Bytes(Vec<u8>),
    }

    type Fields = Vec<(u32, Value)>;

    fn read_varint(data: &[u8], pos: &mut usize) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *data.get(*pos).expect("varint runs past the end");
            *pos += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return value;
            }
        }
        panic!("varint longer than 10 bytes");
    }

    fn read_fixed(data: &[u8], pos: &mut usize, n: usize) -> u64 {
        let bytes = data.get(*pos..*pos + n).expect("fixed-width value runs past the end");
        *pos += n;
        bytes.iter().rev().fold(0, |v, &b| (v << 8) | u64::from(b))
    }

    /// A message's fields in the order they come.
    fn decode(data: &[u8]) -> Fields {
        let mut pos = 0;
        let mut fields = Vec::new();
        while pos < data.len() {
            let key = read_varint(data, &mut pos);
            let field = u32::try_from(key >> 3).unwrap();
            assert_ne!(field, 0, "field number 0");
            let value = match key & 7 {
                0 => Value::Number(read_varint(data, &mut pos)),
                1 => Value::Number(read_fixed(data, &mut pos, 8)),
                2 => {
                    let len = read_varint(data, &mut pos) as usize;
                    let bytes = data.get(pos..pos + len).expect("field runs past the end");
                    pos += len;
                    Value::Bytes(bytes.to_vec())
                }
                5 => Value::Number(read_fixed(data, &mut pos, 4)),
                t => panic!("wire type {t}"),
            };
            fields.push((field, value));
        }
        fields
    }

    /// The values of a repeated numeric field, packed or not.
    fn numbers(fields: &Fields, field: u32) -> Vec<u64> {
        let mut out = Vec::new();
        for (_, v) in fields.iter().filter(|(f, _)| *f == field) {
            match v {
                Value::Number(n) => out.push(*n),
                Value::Bytes(b) => {
                    let mut pos = 0;
                    while pos < b.len() {
                        out.push(read_varint(b, &mut pos));
                    }
                }
            }
        }
        out
    }

    /// A numeric field: its last value (protobuf's rule), 0 when absent.
    fn number(fields: &Fields, field: u32) -> u64 {
        numbers(fields, field).last().copied().unwrap_or(0)
    }

    fn bytes(fields: &Fields, field: u32) -> Vec<Vec<u8>> {
        fields
            .iter()
            .filter(|(f, _)| *f == field)
            .map(|(_, v)| match v {
                Value::Bytes(b) => b.clone(),
                Value::Number(_) => panic!("field {field} is not length-delimited"),
            })
            .collect()
    }

    fn messages(fields: &Fields, field: u32) -> Vec<Fields> {
        bytes(fields, field).iter().map(|b| decode(b)).collect()
    }

    // --- profile.proto, decoded ---

    #[derive(Debug, PartialEq)]
    struct Sample {
        location_id: Vec<u64>,
        value: Vec<u64>,
    }

    #[derive(Debug, PartialEq)]
    struct Mapping {
        id: u64,
        start: u64,
        limit: u64,
        offset: u64,
        filename: String,
        build_id: String,
        /// has_functions, has_filenames, has_line_numbers, has_inline_frames.
        has: [bool; 4],
    }

    #[derive(Debug, PartialEq)]
    struct Location {
        id: u64,
        mapping_id: u64,
        address: u64,
        /// (function_id, line).
        lines: Vec<(u64, u64)>,
    }

    #[derive(Debug, PartialEq)]
    struct Function {
        id: u64,
        name: String,
        system_name: String,
        filename: String,
        start_line: u64,
    }

    #[derive(Debug)]
    struct Pprof {
        strings: Vec<String>,
        /// (type, unit).
        sample_types: Vec<(String, String)>,
        samples: Vec<Sample>,
        mappings: Vec<Mapping>,
        locations: Vec<Location>,
        functions: Vec<Function>,
        time_nanos: u64,
        duration_nanos: u64,
        period_type: (String, String),
        period: u64,
        comments: Vec<String>,
        default_sample_type: String,
    }

    fn gunzip(data: &[u8]) -> Vec<u8> {
        assert_eq!(&data[..2], &[0x1f, 0x8b], "not gzip");
        let mut out = Vec::new();
        GzDecoder::new(data).read_to_end(&mut out).unwrap();
        out
    }

    fn parse(gzipped: &[u8]) -> Pprof {
        let top = decode(&gunzip(gzipped));
        let strings: Vec<String> =
            bytes(&top, 6).into_iter().map(|b| String::from_utf8(b).unwrap()).collect();
        let s = |i: u64| strings.get(i as usize).unwrap_or_else(|| panic!("no string {i}")).clone();
        let vt = |m: &Fields| (s(number(m, 1)), s(number(m, 2)));
        let period_type = messages(&top, 11);
        assert!(period_type.len() <= 1);
        Pprof {
            sample_types: messages(&top, 1).iter().map(vt).collect(),
            samples: messages(&top, 2)
                .iter()
                .map(|m| Sample { location_id: numbers(m, 1), value: numbers(m, 2) })
                .collect(),
            mappings: messages(&top, 3)
                .iter()
                .map(|m| Mapping {
                    id: number(m, 1),
                    start: number(m, 2),
                    limit: number(m, 3),
                    offset: number(m, 4),
                    filename: s(number(m, 5)),
                    build_id: s(number(m, 6)),
                    has: [7, 8, 9, 10].map(|f| number(m, f) != 0),
                })
                .collect(),
            locations: messages(&top, 4)
                .iter()
                .map(|m| Location {
                    id: number(m, 1),
                    mapping_id: number(m, 2),
                    address: number(m, 3),
                    lines: messages(m, 4).iter().map(|l| (number(l, 1), number(l, 2))).collect(),
                })
                .collect(),
            functions: messages(&top, 5)
                .iter()
                .map(|m| Function {
                    id: number(m, 1),
                    name: s(number(m, 2)),
                    system_name: s(number(m, 3)),
                    filename: s(number(m, 4)),
                    start_line: number(m, 5),
                })
                .collect(),
            time_nanos: number(&top, 9),
            duration_nanos: number(&top, 10),
            period_type: period_type.first().map(vt).unwrap_or_default(),
            period: number(&top, 12),
            comments: numbers(&top, 13).into_iter().map(s).collect(),
            default_sample_type: s(number(&top, 14)),
            strings,
        }
    }

    // --- A synthetic profile ---

    const PKG_SO: usize = 0;
    const LIBR_SO: usize = 1;

    fn function(name: &str, kind: FrameKind, module: Option<usize>, file: Option<usize>) -> super::Function {
        super::Function { name: name.into(), label: name.into(), kind, module, file }
    }

    fn line(function: usize, file: Option<usize>, line: Option<u32>) -> Line {
        Line { function, file, line }
    }

    /// lapply() → fit_model() → its `for` loop → R's do_dotcall() →
    /// fit_c() of pkg.so with dot() inlined into it.
    fn profile(event: Event) -> Profile {
        Profile {
            event,
            period: 10_000_000,
            start_unix_ns: 1_700_000_000_123_456_789,
            duration_ns: 2_500_000_000,
            files: vec!["R/model.R".into(), "src/fit.c".into(), "src/dot.h".into()],
            modules: vec![
                Module {
                    path: "/usr/lib/R/site-library/pkg/libs/pkg.so".into(),
                    build_id: Some("5f3c0ffee0ddba11".into()),
                    start: 0x7f00_0000_0000,
                    limit: 0x7f00_0001_0000,
                    offset: 0x1000,
                },
                Module {
                    path: "/usr/lib/R/lib/libR.so".into(),
                    build_id: None,
                    start: 0x7f10_0000_0000,
                    limit: 0x7f10_0040_0000,
                    offset: 0,
                },
            ],
            functions: vec![
                function("lapply", FrameKind::R, None, None),
                function("fit_model", FrameKind::R, None, Some(0)),
                function("[for]", FrameKind::Loop, None, Some(0)),
                function("do_dotcall", FrameKind::Native, Some(LIBR_SO), None),
                function("fit_c", FrameKind::Native, Some(PKG_SO), Some(1)),
                function("dot", FrameKind::Native, Some(PKG_SO), Some(2)),
            ],
            locations: vec![
                super::Location { module: None, address: 0, lines: vec![line(0, None, None)] },
                super::Location { module: None, address: 0, lines: vec![line(1, Some(0), Some(12))] },
                super::Location { module: None, address: 0, lines: vec![line(2, Some(0), Some(13))] },
                super::Location {
                    module: Some(LIBR_SO),
                    address: 0x7f10_0012_3456,
                    lines: vec![line(3, None, None)],
                },
                super::Location {
                    module: Some(PKG_SO),
                    address: 0x7f00_0000_1a2b,
                    lines: vec![line(5, Some(2), Some(7)), line(4, Some(1), Some(40))],
                },
            ],
            stacks: vec![
                Stack { locations: vec![4, 3, 2, 1, 0], count: 5, thread: 0, process: 0, bytes: None },
                Stack { locations: vec![2, 1, 0], count: 3, thread: 0, process: 0, bytes: None },
                Stack { locations: vec![1, 0], count: 0, thread: 0, process: 0, bytes: None },
                Stack { locations: vec![3, 1, 0], count: 2, thread: 0, process: 0, bytes: None },
            ],
            threads: Vec::new(),
            processes: Vec::new(),
        }
    }

    fn empty() -> Profile {
        Profile {
            event: Event::Elapsed,
            period: 20_000_000,
            start_unix_ns: 0,
            duration_ns: 0,
            functions: vec![],
            locations: vec![],
            stacks: vec![],
            files: vec![],
            modules: vec![],
            threads: vec![],
            processes: Vec::new(),
        }
    }

    /// Ids non-zero and unique.
    fn assert_ids(what: &str, ids: impl Iterator<Item = u64>) {
        let mut seen = HashSet::new();
        for id in ids {
            assert_ne!(id, 0, "{what} id 0");
            assert!(seen.insert(id), "{what} id {id} twice");
        }
    }

    #[test]
    fn varints_are_base_128() {
        let enc = |v| {
            let mut out = Vec::new();
            varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(1), [1]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX).len(), 10);
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            assert_eq!(read_varint(&enc(v), &mut 0), v);
        }
    }

    #[test]
    fn strings_are_deduplicated_and_start_empty() {
        let p = parse(&encode(&profile(Event::Cpu)));
        assert_eq!(p.strings[0], "");
        let mut sorted = p.strings.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), p.strings.len(), "{:?}", p.strings);
        // Files shared by functions and mappings' build ids are in once.
        assert!(p.strings.iter().any(|s| s == "R/model.R"));
    }

    #[test]
    fn a_memory_profile_has_the_heap_profiles_four_types() {
        let mut profile = profile(Event::Alloc);
        profile.period = 512 * 1024;
        profile.stacks.truncate(2);
        profile.stacks[0].bytes = Some(crate::profile::model::Bytes {
            alloc_bytes: 3 << 20,
            alloc_count: 6,
            inuse_bytes: 1 << 20,
            inuse_count: 2,
        });
        profile.stacks[1].bytes =
            Some(crate::profile::model::Bytes { alloc_bytes: 1 << 20, alloc_count: 2, ..Default::default() });
        let p = parse(&encode(&profile));
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            p.sample_types,
            [
                pair("alloc_objects", "count"),
                pair("alloc_space", "bytes"),
                pair("inuse_objects", "count"),
                pair("inuse_space", "bytes")
            ]
        );
        assert_eq!(p.default_sample_type, "inuse_space");
        assert_eq!((p.period_type, p.period), (pair("space", "bytes"), 512 * 1024));
        assert_eq!(p.samples[0].value, [6, 3 << 20, 2, 1 << 20]);
        assert_eq!(p.samples[1].value, [2, 1 << 20, 0, 0]);
    }

    #[test]
    fn sample_types_and_period() {
        let p = parse(&encode(&profile(Event::Cpu)));
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(p.sample_types, [pair("samples", "count"), pair("cpu", "nanoseconds")]);
        assert_eq!(p.period_type, pair("cpu", "nanoseconds"));
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.default_sample_type, "cpu");
        assert_eq!(p.time_nanos, 1_700_000_000_123_456_789);
        assert_eq!(p.duration_nanos, 2_500_000_000);
        assert_eq!(p.comments, [COMMENT]);

        let p = parse(&encode(&profile(Event::Elapsed)));
        assert_eq!(p.sample_types, [pair("samples", "count"), pair("wall", "nanoseconds")]);
        assert_eq!(p.period_type, pair("wall", "nanoseconds"));
        assert_eq!(p.default_sample_type, "wall");
    }

    #[test]
    fn ids_are_non_zero_unique_and_resolve() {
        let p = parse(&encode(&profile(Event::Cpu)));
        assert_ids("mapping", p.mappings.iter().map(|m| m.id));
        assert_ids("location", p.locations.iter().map(|l| l.id));
        assert_ids("function", p.functions.iter().map(|f| f.id));
        let mappings: HashSet<u64> = p.mappings.iter().map(|m| m.id).collect();
        let locations: HashSet<u64> = p.locations.iter().map(|l| l.id).collect();
        let functions: HashSet<u64> = p.functions.iter().map(|f| f.id).collect();
        for s in &p.samples {
            assert!(!s.location_id.is_empty());
            for l in &s.location_id {
                assert!(locations.contains(l), "location {l}");
            }
        }
        for l in &p.locations {
            let m = l.mapping_id;
            assert!(m == 0 || mappings.contains(&m), "mapping {m}");
            assert!(!l.lines.is_empty());
            for (f, _) in &l.lines {
                assert!(functions.contains(f), "function {f}");
            }
        }
        assert_eq!((p.mappings.len(), p.locations.len(), p.functions.len()), (2, 5, 6));
    }

    #[test]
    fn samples_are_leaf_first_with_count_and_time() {
        let p = parse(&encode(&profile(Event::Cpu)));
        // The stack with no samples is left out.
        assert_eq!(
            p.samples,
            [
                Sample { location_id: vec![5, 4, 3, 2, 1], value: vec![5, 50_000_000] },
                Sample { location_id: vec![3, 2, 1], value: vec![3, 30_000_000] },
                Sample { location_id: vec![4, 2, 1], value: vec![2, 20_000_000] },
            ]
        );
        assert!(p.samples.iter().all(|s| s.value.len() == p.sample_types.len()));
    }

    #[test]
    fn native_location_keeps_inlined_lines_first() {
        let p = parse(&encode(&profile(Event::Cpu)));
        let fit_c = &p.locations[4];
        assert_eq!(
            *fit_c,
            Location {
                id: 5,
                mapping_id: PKG_SO as u64 + 1,
                address: 0x7f00_0000_1a2b,
                lines: vec![(6, 7), (5, 40)]
            }
        );
        let name = |id: u64| &p.functions.iter().find(|f| f.id == id).unwrap().name;
        assert_eq!([name(6), name(5)], ["dot", "fit_c"]);
    }

    #[test]
    fn r_and_loop_locations_have_no_mapping() {
        let p = parse(&encode(&profile(Event::Cpu)));
        assert_eq!(p.locations[0], Location { id: 1, mapping_id: 0, address: 0, lines: vec![(1, 0)] });
        assert_eq!(p.locations[2], Location { id: 3, mapping_id: 0, address: 0, lines: vec![(3, 13)] });
        assert_eq!(p.locations[3].mapping_id, LIBR_SO as u64 + 1);
    }

    #[test]
    fn functions_carry_name_and_file() {
        let p = parse(&encode(&profile(Event::Cpu)));
        let f = |id, name: &str, system: bool, filename: &str| Function {
            id,
            name: name.into(),
            system_name: if system { name.into() } else { String::new() },
            filename: filename.into(),
            start_line: 0,
        };
        assert_eq!(
            p.functions,
            [
                f(1, "lapply", false, ""),
                f(2, "fit_model", false, "R/model.R"),
                f(3, "[for]", false, "R/model.R"),
                f(4, "do_dotcall", true, ""),
                f(5, "fit_c", true, "src/fit.c"),
                f(6, "dot", true, "src/dot.h"),
            ]
        );
    }

    #[test]
    fn cxx_functions_are_named_without_parameters_with_the_signature_kept() {
        let mut profile = profile(Event::Cpu);
        profile.functions[4].name = "wtest::fit_c(int, double) const".into();
        let p = parse(&encode(&profile));
        let fit = p.functions.iter().find(|f| f.id == 5).unwrap();
        assert_eq!(fit.name, "wtest::fit_c");
        assert_eq!(fit.system_name, "wtest::fit_c(int, double) const");
        // R functions keep their names whole, parentheses and all.
        profile.functions[1].name = "(function(x) x)".into();
        let p = parse(&encode(&profile));
        assert_eq!(p.functions[1].name, "(function(x) x)");
    }

    #[test]
    fn mappings_are_marked_symbolized() {
        let p = parse(&encode(&profile(Event::Cpu)));
        assert_eq!(
            p.mappings,
            [
                Mapping {
                    id: 1,
                    start: 0x7f00_0000_0000,
                    limit: 0x7f00_0001_0000,
                    offset: 0x1000,
                    filename: "/usr/lib/R/site-library/pkg/libs/pkg.so".into(),
                    build_id: "5f3c0ffee0ddba11".into(),
                    has: [true; 4],
                },
                Mapping {
                    id: 2,
                    start: 0x7f10_0000_0000,
                    limit: 0x7f10_0040_0000,
                    offset: 0,
                    filename: "/usr/lib/R/lib/libR.so".into(),
                    build_id: "".into(),
                    has: [true; 4],
                },
            ]
        );
    }

    #[test]
    fn empty_profile_encodes() {
        let p = parse(&encode(&empty()));
        assert_eq!(p.strings[0], "");
        assert_eq!(p.sample_types.len(), 2);
        assert_eq!(p.period_type, ("wall".to_string(), "nanoseconds".to_string()));
        assert_eq!(p.period, 20_000_000);
        assert!(p.samples.is_empty() && p.locations.is_empty());
        assert!(p.functions.is_empty() && p.mappings.is_empty());
    }

    #[test]
    fn huge_counts_saturate() {
        let mut p = empty();
        p.stacks.push(Stack { locations: vec![], count: u64::MAX, thread: 0, process: 0, bytes: None });
        let p = parse(&encode(&p));
        let max = i64::MAX as u64;
        assert_eq!(p.samples, [Sample { location_id: vec![], value: vec![max, max] }]);
    }
}
