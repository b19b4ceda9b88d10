//! One unit's line table: the rows of its line program by address, and
//! its file names as paths (the unit's directory, the file's directory and
//! its name joined, as addr2line and GNU tools print them).

use super::Reader;
use gimli::Reader as _;
use gimli::UnitRef;
use std::sync::Arc;

pub struct Lines {
    /// Rendered file names by index (DWARF 4 has no file 0: empty there).
    files: Vec<Option<Arc<str>>>,
    /// Sequences by start address.
    sequences: Vec<Sequence>,
}

struct Sequence {
    start: u64,
    end: u64,
    rows: Vec<Row>,
}

#[derive(Clone, Copy)]
struct Row {
    address: u64,
    file: u32,
    line: u32,
    column: u32,
}

/// A position in the source: what a row says, or where an inlined call is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

impl Lines {
    /// Runs the unit's line program. None if it has none or it is damaged.
    pub fn parse(unit: UnitRef<'_, Reader>) -> Option<Lines> {
        let program = unit.line_program.clone()?;
        let mut rows = program.rows();
        let mut sequences = Vec::new();
        let mut current: Vec<Row> = Vec::new();
        while let Some((_, row)) = rows.next_row().ok()? {
            if row.end_sequence() {
                let rows = std::mem::take(&mut current);
                if let Some(start) = rows.first().map(|r| r.address) {
                    if start < row.address() {
                        sequences.push(Sequence { start, end: row.address(), rows });
                    }
                }
                continue;
            }
            let r = Row {
                address: row.address(),
                file: u32::try_from(row.file_index()).unwrap_or(u32::MAX),
                line: row.line().map_or(0, |l| u32::try_from(l.get()).unwrap_or(0)),
                column: match row.column() {
                    gimli::ColumnType::LeftEdge => 0,
                    gimli::ColumnType::Column(c) => u32::try_from(c.get()).unwrap_or(0),
                },
            };
            // Of several rows at one address, the last one stands.
            match current.last_mut() {
                Some(last) if last.address == r.address => *last = r,
                _ => current.push(r),
            }
        }
        sequences.sort_unstable_by_key(|s| s.start);
        let header = rows.header();
        let mut files = Vec::new();
        let mut index = 0u64;
        loop {
            match header.file(index) {
                Some(f) => files.push(render(unit, f, header).map(Arc::from)),
                None if index == 0 => files.push(None),
                None => break,
            }
            index += 1;
        }
        Some(Lines { files, sequences })
    }

    /// The rendered name of file `index`.
    pub fn file(&self, index: u64) -> Option<Arc<str>> {
        self.files.get(usize::try_from(index).ok()?).cloned().flatten()
    }

    /// The row covering `probe`, if any sequence does.
    pub fn find(&self, probe: u64) -> Option<Location> {
        let i = self.sequences.partition_point(|s| s.start <= probe).checked_sub(1)?;
        let seq = &self.sequences[i];
        if probe >= seq.end {
            return None;
        }
        let row = seq.rows[seq.rows.partition_point(|r| r.address <= probe).checked_sub(1)?];
        let line = (row.line != 0).then_some(row.line);
        Some(Location { file: self.file(u64::from(row.file)), line, column: line.map(|_| row.column) })
    }

    /// The address ranges the sequences cover (for units that give none).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.sequences.iter().map(|s| (s.start, s.end))
    }
}

fn render(
    unit: UnitRef<'_, Reader>,
    file: &gimli::FileEntry<Reader>,
    header: &gimli::LineProgramHeader<Reader>,
) -> Option<String> {
    let text = |v| {
        unit.attr_string(v).ok().map(|r| r.to_string_lossy().map(|s| s.into_owned())).and_then(Result::ok)
    };
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy().ok()?.into_owned(),
        None => String::new(),
    };
    // Directory 0 is the unit's own.
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            push(&mut path, &text(dir)?);
        }
    }
    push(&mut path, &text(file.path_name())?);
    Some(path)
}

/// Appends `part` to `path` with a separator, or replaces it when `part`
/// is absolute.
fn push(path: &mut String, part: &str) {
    let rooted =
        |p: &str| p.starts_with('/') || p.starts_with('\\') || matches!(p.get(1..3), Some(":/" | ":\\"));
    if rooted(part) {
        *path = part.to_string();
        return;
    }
    let sep = if path.starts_with('\\') || path.get(1..3) == Some(":\\") { '\\' } else { '/' };
    if !path.is_empty() && !path.ends_with(sep) {
        path.push(sep);
    }
    path.push_str(part);
}

#[cfg(test)]
mod tests {
    use super::push;

    #[test]
    fn paths_join_with_one_separator_and_absolute_parts_replace() {
        let mut p = String::from("/build/pkg");
        push(&mut p, "src");
        push(&mut p, "a.c");
        assert_eq!(p, "/build/pkg/src/a.c");
        let mut p = String::from("/build/");
        push(&mut p, "a.c");
        assert_eq!(p, "/build/a.c");
        push(&mut p, "/usr/include/stdio.h");
        assert_eq!(p, "/usr/include/stdio.h");
        let mut p = String::new();
        push(&mut p, "./csu/../csu/libc-start.c");
        assert_eq!(p, "./csu/../csu/libc-start.c");
    }
}
