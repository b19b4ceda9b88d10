//! Rprof's file format, as `Rprof()` writes it (R 3.0 – 4.6: `doprof` and
//! `lineprof` in R's eval.c), for `utils::summaryRprof()` and profvis.
//!
//! A header line, `sample.interval=<µs>` (prefixed `line profiling: ` under
//! line profiling), then one line per sample, innermost entry first, every
//! token followed by a space: `"f" "g" `. Under line profiling a position
//! `F#L` (file number, line) comes first for the innermost entry (the line
//! running now) and after each label for the next outer entry (where this
//! one was called from); `#File F: path` appears just before the first
//! sample line that uses file `F`, numbered from 1 in order of first use.
//!
//! Readers split samples on spaces (`summaryRprof`) or on whitespace
//! honouring quotes (profvis's `scan()`), so a label with a space, other
//! whitespace, a control character or a double quote would break them: the
//! model promises labels without them, and any that slips through is written
//! with `_` in its place. R itself writes none of these except the quotes of
//! `x[["a"]]`, which we write `x[[_a_]]`.

use super::model::{Line, Profile, Stack};
use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

/// Writes `p` in Rprof's format, with positions when `lines`.
///
/// Streams: each distinct stack is formatted once and its line repeated
/// `count` times, so consecutive identical samples stay together. Stacks
/// with no entries (R writes no line for an empty sample) or a zero count
/// are skipped. Panics if an index of `p` is out of range (a broken
/// model).
pub fn write(p: &Profile, lines: bool, out: &mut impl Write) -> io::Result<()> {
    // One write per sample line would be a syscall each on a bare File.
    let mut out = BufWriter::new(out);
    write_header(p.period, lines, &mut out)?;
    let mut files = FileNumbers::new(&p.files);
    let mut sample = Vec::new();
    for stack in p.stacks.iter().filter(|s| s.count > 0) {
        sample.clear();
        let numbered_before = files.numbered.len();
        if lines {
            format_with_positions(p, stack, &mut files, &mut sample);
        } else {
            format_labels(p, stack, &mut sample);
        }
        if sample.is_empty() {
            continue;
        }
        sample.push(b'\n');
        files.write_new(numbered_before, &mut out)?;
        for _ in 0..stack.count {
            out.write_all(&sample)?;
        }
    }
    out.flush()
}

/// [`write`] into a `String` (tests, small profiles).
#[cfg(test)]
pub(crate) fn to_string(p: &Profile, lines: bool) -> String {
    let mut buf = Vec::new();
    write(p, lines, &mut buf).expect("writing to a Vec cannot fail");
    String::from_utf8(buf).expect("labels and paths are UTF-8")
}

/// The interval in whole microseconds, rounded as R rounds it
/// (`(int)(1e6 * interval + 0.5)`).
fn write_header(interval_ns: u64, lines: bool, out: &mut impl Write) -> io::Result<()> {
    let us = interval_ns / 1000 + u64::from(interval_ns % 1000 >= 500);
    let prefix = if lines { "line profiling: " } else { "" };
    writeln!(out, "{prefix}sample.interval={us}")
}

/// `"f" "g" `: the labels of every entry, innermost first.
fn format_labels(p: &Profile, stack: &Stack, buf: &mut Vec<u8>) {
    for line in p.flat_lines(stack) {
        push_label(&p.functions[line.function].label, buf);
    }
}

/// `1#3 "f" 1#7 "g" `: the innermost entry's position, then each label
/// followed by the position of the entry after it (its caller), as
/// `lineprof` writes them. Unknown positions are left out.
fn format_with_positions(p: &Profile, stack: &Stack, files: &mut FileNumbers, buf: &mut Vec<u8>) {
    let mut entries = p.flat_lines(stack).peekable();
    if let Some(innermost) = entries.peek() {
        files.push_position(innermost, buf);
    }
    while let Some(line) = entries.next() {
        push_label(&p.functions[line.function].label, buf);
        if let Some(caller) = entries.peek() {
            files.push_position(caller, buf);
        }
    }
}

/// `"label" `, with anything that would split the token replaced by `_`.
fn push_label(label: &str, buf: &mut Vec<u8>) {
    buf.push(b'"');
    if label.chars().any(breaks_token) {
        buf.extend(label.chars().map(|c| if breaks_token(c) { '_' } else { c }).collect::<String>().bytes());
    } else {
        buf.extend_from_slice(label.as_bytes());
    }
    buf.extend_from_slice(b"\" ");
}

fn breaks_token(c: char) -> bool {
    c == '"' || c.is_whitespace() || c.is_control()
}

/// Rprof's file numbers, given on first use.
struct FileNumbers<'a> {
    files: &'a [String],
    /// The number of each file of the profile once used (0: not yet).
    by_index: Vec<u32>,
    /// R numbers paths, not srcfiles: two files with one path share it.
    by_path: HashMap<&'a str, u32>,
    /// Paths in the order of their numbers (number = position + 1).
    numbered: Vec<&'a str>,
}

impl<'a> FileNumbers<'a> {
    fn new(files: &'a [String]) -> Self {
        FileNumbers { files, by_index: vec![0; files.len()], by_path: HashMap::new(), numbered: Vec::new() }
    }

    /// The number of file `index`, giving it one on first use.
    fn number(&mut self, index: usize) -> Option<u32> {
        let path = self.files.get(index)?;
        if self.by_index[index] == 0 {
            let numbered = &mut self.numbered;
            self.by_index[index] = *self.by_path.entry(path).or_insert_with(|| {
                numbered.push(path);
                numbered.len() as u32
            });
        }
        Some(self.by_index[index])
    }

    /// `F#L ` when the entry has both a file and a line. Line 0 is DWARF's
    /// "no line", never an R line: left out too.
    fn push_position(&mut self, line: &Line, buf: &mut Vec<u8>) {
        let (Some(file), Some(l)) = (line.file, line.line.filter(|&l| l > 0)) else { return };
        if let Some(f) = self.number(file) {
            write!(buf, "{f}#{l} ").expect("writing to a Vec cannot fail");
        }
    }

    /// `#File F: path` for the files numbered from position `from` on. A
    /// line break in a path would end the line early: written as `_`.
    fn write_new(&self, from: usize, out: &mut impl Write) -> io::Result<()> {
        for (i, path) in self.numbered.iter().enumerate().skip(from) {
            let path: String = path.chars().map(|c| if matches!(c, '\n' | '\r') { '_' } else { c }).collect();
            writeln!(out, "#File {}: {path}", i + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{Event, FrameKind, Function, Location};
    use super::*;

    /// A profile built by hand.
    struct Builder(Profile);

    impl Builder {
        fn new(interval_ns: u64) -> Self {
            Builder(Profile {
                event: Event::Cpu,
                period: interval_ns,
                start_unix_ns: 0,
                duration_ns: 0,
                functions: Vec::new(),
                locations: Vec::new(),
                stacks: Vec::new(),
                files: Vec::new(),
                modules: Vec::new(),
                threads: Vec::new(),
                processes: Vec::new(),
            })
        }

        fn file(&mut self, path: &str) -> usize {
            self.0.files.push(path.to_string());
            self.0.files.len() - 1
        }

        fn function(&mut self, label: &str, kind: FrameKind) -> usize {
            let name = label.to_string();
            self.0.functions.push(Function {
                name,
                label: label.to_string(),
                kind,
                module: None,
                file: None,
            });
            self.0.functions.len() - 1
        }

        /// A location of `(function, file, line)` entries, innermost first.
        fn location(&mut self, lines: &[(usize, Option<usize>, Option<u32>)]) -> usize {
            let lines = lines.iter().map(|&(function, file, line)| Line { function, file, line }).collect();
            self.0.locations.push(Location { module: None, address: 0, lines });
            self.0.locations.len() - 1
        }

        fn stack(&mut self, locations: &[usize], count: u64) {
            self.0.stacks.push(Stack {
                locations: locations.to_vec(),
                count,
                thread: 0,
                process: 0,
                bytes: None,
            });
        }
    }

    /// R's `outer()` (b.R) calls `inner()` (a.R), whose `for` loop calls
    /// `.Call()` into `work` (mod.c) with `helper` inlined into it.
    fn joint() -> Profile {
        let mut b = Builder::new(20_000_000);
        let (a_r, mod_c, b_r) = (b.file("/scripts/a.R"), b.file("/src/mod.c"), b.file("/scripts/b.R"));
        let helper = b.function("/mod.so::helper", FrameKind::Native);
        let work = b.function("/mod.so::work", FrameKind::Native);
        let for_ = b.function("[for]", FrameKind::Loop);
        let inner = b.function("inner", FrameKind::R);
        let outer = b.function("outer", FrameKind::R);
        let native = b.location(&[(helper, Some(mod_c), Some(12)), (work, Some(mod_c), Some(30))]);
        let lp = b.location(&[(for_, Some(a_r), Some(5))]);
        let r_inner = b.location(&[(inner, Some(a_r), Some(4))]);
        let r_outer = b.location(&[(outer, Some(b_r), Some(2))]);
        b.stack(&[r_inner, r_outer], 2);
        b.stack(&[native, lp, r_inner, r_outer], 3);
        b.0
    }

    #[test]
    fn labels_without_line_profiling() {
        assert_eq!(
            to_string(&joint(), false),
            "sample.interval=20000\n\
             \"inner\" \"outer\" \n\
             \"inner\" \"outer\" \n\
             \"/mod.so::helper\" \"/mod.so::work\" \"[for]\" \"inner\" \"outer\" \n\
             \"/mod.so::helper\" \"/mod.so::work\" \"[for]\" \"inner\" \"outer\" \n\
             \"/mod.so::helper\" \"/mod.so::work\" \"[for]\" \"inner\" \"outer\" \n"
        );
    }

    #[test]
    fn files_numbered_on_first_use_and_announced_just_before() {
        assert_eq!(
            to_string(&joint(), true),
            "line profiling: sample.interval=20000\n\
             #File 1: /scripts/a.R\n\
             #File 2: /scripts/b.R\n\
             1#4 \"inner\" 2#2 \"outer\" \n\
             1#4 \"inner\" 2#2 \"outer\" \n\
             #File 3: /src/mod.c\n\
             3#12 \"/mod.so::helper\" 3#30 \"/mod.so::work\" 1#5 \"[for]\" 1#4 \"inner\" 2#2 \"outer\" \n\
             3#12 \"/mod.so::helper\" 3#30 \"/mod.so::work\" 1#5 \"[for]\" 1#4 \"inner\" 2#2 \"outer\" \n\
             3#12 \"/mod.so::helper\" 3#30 \"/mod.so::work\" 1#5 \"[for]\" 1#4 \"inner\" 2#2 \"outer\" \n"
        );
    }

    #[test]
    fn unknown_positions_are_left_out() {
        let mut b = Builder::new(10_000_000);
        let c = b.file("/src/f.c");
        let (f, g, h, k) = (
            b.function("/lib.so::f", FrameKind::Native),
            b.function("g", FrameKind::R),
            b.function("h", FrameKind::R),
            b.function("k", FrameKind::R),
        );
        // No debug information; a file without a line; line 0; known.
        let l = [
            b.location(&[(f, None, None)]),
            b.location(&[(g, Some(c), None)]),
            b.location(&[(h, Some(c), Some(0))]),
            b.location(&[(k, Some(c), Some(9))]),
        ];
        b.stack(&l, 1);
        b.stack(&l[..3], 1);
        assert_eq!(
            to_string(&b.0, true),
            "line profiling: sample.interval=10000\n\
             #File 1: /src/f.c\n\
             \"/lib.so::f\" \"g\" \"h\" 1#9 \"k\" \n\
             \"/lib.so::f\" \"g\" \"h\" \n"
        );
    }

    #[test]
    fn file_announced_only_once_and_only_when_used() {
        let mut b = Builder::new(10_000_000);
        let x = b.file("/x.R");
        b.file("/unused.R");
        let y = b.file("/y.R");
        let f = b.function("f", FrameKind::R);
        let g = b.function("g", FrameKind::R);
        let fx = b.location(&[(f, Some(x), Some(1))]);
        let gx = b.location(&[(g, Some(x), Some(2))]);
        let gy = b.location(&[(g, Some(y), Some(3))]);
        b.stack(&[fx], 1);
        b.stack(&[fx, gy], 1);
        b.stack(&[gx], 1);
        assert_eq!(
            to_string(&b.0, true),
            "line profiling: sample.interval=10000\n\
             #File 1: /x.R\n\
             1#1 \"f\" \n\
             #File 2: /y.R\n\
             1#1 \"f\" 2#3 \"g\" \n\
             1#2 \"g\" \n"
        );
    }

    #[test]
    fn one_path_one_number() {
        let mut b = Builder::new(10_000_000);
        let (x1, x2) = (b.file("/x.R"), b.file("/x.R"));
        let f = b.function("f", FrameKind::R);
        let l = [b.location(&[(f, Some(x1), Some(1))]), b.location(&[(f, Some(x2), Some(2))])];
        b.stack(&l, 1);
        assert_eq!(
            to_string(&b.0, true),
            "line profiling: sample.interval=10000\n#File 1: /x.R\n1#1 \"f\" 1#2 \"f\" \n"
        );
    }

    #[test]
    fn empty_and_zero_count_stacks_are_skipped() {
        let mut b = Builder::new(10_000_000);
        let x = b.file("/x.R");
        let f = b.function("f", FrameKind::R);
        let empty = b.location(&[]);
        let fx = b.location(&[(f, Some(x), Some(1))]);
        b.stack(&[], 4);
        b.stack(&[empty], 2);
        b.stack(&[fx], 0);
        assert_eq!(to_string(&b.0, true), "line profiling: sample.interval=10000\n");
        assert_eq!(to_string(&b.0, false), "sample.interval=10000\n");
    }

    #[test]
    fn labels_are_sanitized() {
        let mut b = Builder::new(10_000_000);
        let odd = ["my fun", "x[[\"a\"]]", "a\tb\nc\u{a0}d", "ok::f"];
        let l: Vec<usize> = odd
            .iter()
            .map(|s| {
                let f = b.function(s, FrameKind::R);
                b.location(&[(f, None, None)])
            })
            .collect();
        b.stack(&l, 1);
        assert_eq!(
            to_string(&b.0, false),
            "sample.interval=10000\n\"my_fun\" \"x[[_a_]]\" \"a_b_c_d\" \"ok::f\" \n"
        );
    }

    #[test]
    fn paths_keep_spaces_but_not_line_breaks() {
        let mut b = Builder::new(10_000_000);
        let x = b.file("/my dir/x\n.R");
        let f = b.function("f", FrameKind::R);
        let fx = b.location(&[(f, Some(x), Some(1))]);
        b.stack(&[fx], 1);
        assert_eq!(
            to_string(&b.0, true),
            "line profiling: sample.interval=10000\n#File 1: /my dir/x_.R\n1#1 \"f\" \n"
        );
    }

    #[test]
    fn header_interval_rounded_to_microseconds() {
        let header = |ns| to_string(&Builder::new(ns).0, false);
        assert_eq!(header(20_000_000), "sample.interval=20000\n");
        assert_eq!(header(1_499), "sample.interval=1\n");
        assert_eq!(header(1_500), "sample.interval=2\n");
        assert_eq!(header(10_000_499), "sample.interval=10000\n");
        assert_eq!(header(0), "sample.interval=0\n");
        assert_eq!(header(u64::MAX), format!("sample.interval={}\n", u64::MAX / 1000 + 1));
    }
}
