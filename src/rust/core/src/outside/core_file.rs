//! A core file as a process to read: its threads' registers (`NT_PRSTATUS`
//! notes), its memory (the core's loadable segments, and for what the
//! kernel did not dump, such as code, the mapped files' bytes on disk as
//! the `NT_FILE` note lists them) and its mappings. A core cut short (a
//! copy that stopped, a disk that filled up) is read as far as it goes,
//! and says what is missing ([`Core::damage`]).

use super::ptrace::Thread;
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::procfs::{Mapping, Perms};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_AUXV: u32 = 6;
const NT_FILE: u32 = 0x4649_4c45;
const AT_PHDR: u64 = 3;
const AT_SYSINFO_EHDR: u64 = 33;
/// Most bytes of notes read from a core (in all its `PT_NOTE` segments):
/// a process's notes are a few KB per thread, and a damaged core cannot
/// make the reading of its headers long.
const MAX_NOTES: u64 = 64 << 20;

/// A loadable segment of a core.
#[derive(Clone, Copy, Debug)]
struct Load {
    addr: usize,
    mem_size: usize,
    /// Where its bytes are in the core, and how many the core holds
    /// (0: none, such as code, which is read from the mapped file).
    offset: u64,
    file_size: usize,
}

/// A core file opened for reading.
pub struct Core {
    file: File,
    /// The core's size when it was opened.
    len: u64,
    loads: Vec<Load>,
    /// Whether the notes (the threads' registers) reach past the core's
    /// end.
    notes_cut: bool,
    /// Files mapped into the process: (start, end, offset in the file,
    /// path).
    files: Vec<(usize, usize, u64, String)>,
    opened: RefCell<HashMap<String, Option<File>>>,
    pub pid: i32,
    /// The program's name (`NT_PRPSINFO`'s `pr_fname`).
    pub name: String,
    pub threads: Vec<Thread>,
    /// Where the executable's program headers and the vDSO were (auxv).
    phdr: usize,
    vdso: usize,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl Load {
    /// How many of the segment's bytes a core of `len` bytes holds: fewer
    /// than `file_size` when it ends inside the segment.
    fn held(&self, len: u64) -> u64 {
        len.saturating_sub(self.offset).min(self.file_size as u64)
    }
}

impl Core {
    /// Opens the core file at `path`: a classed error when it is missing,
    /// not a regular file (see `crate::files`), not an x86_64 ELF core, or
    /// cut short before its first thread. Its size is not bounded: it is
    /// read in bounded parts (the headers, at most [`MAX_NOTES`] of notes,
    /// then what a dump asks for).
    pub fn open(path: &str) -> Result<Core> {
        let file = crate::files::open_input(Path::new(path), "core file", u64::MAX)?.file;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let not_core = || Error::BadArgument(format!("{path} is not an ELF core file of an x86_64 process"));
        let cut = |what: &str, end: u64| {
            Error::BadArgument(format!(
                "the core file {path} is cut short: it has {len} bytes, but its {what} reach byte {end}, \
                 so it cannot be read (was it copied whole, or written to a full disk?)"
            ))
        };
        let mut ehdr = [0u8; 64];
        file.read_exact_at(&mut ehdr, 0).map_err(|_| not_core())?;
        if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || u16::from_le_bytes([ehdr[16], ehdr[17]]) != 4 {
            return Err(not_core());
        }
        if u16::from_le_bytes([ehdr[18], ehdr[19]]) != 62 {
            return Err(not_core()); // EM_X86_64
        }
        let phoff = u64_at(&ehdr, 32).ok_or_else(not_core)?;
        let (phentsize, phnum) = (
            u16::from_le_bytes([ehdr[54], ehdr[55]]) as usize,
            u16::from_le_bytes([ehdr[56], ehdr[57]]) as usize,
        );
        if phentsize != 56 || phnum == 0 {
            return Err(not_core());
        }
        let mut ph = vec![0u8; phentsize * phnum];
        if phoff.saturating_add(ph.len() as u64) > len {
            return Err(cut("program headers", phoff.saturating_add(ph.len() as u64)));
        }
        file.read_exact_at(&mut ph, phoff).map_err(|_| not_core())?;
        let mut core = Core {
            file,
            len,
            loads: Vec::new(),
            notes_cut: false,
            files: Vec::new(),
            opened: RefCell::new(HashMap::new()),
            pid: 0,
            name: String::new(),
            threads: Vec::new(),
            phdr: 0,
            vdso: 0,
        };
        let mut notes_end = 0;
        let mut notes_read = 0u64;
        for p in ph.chunks_exact(56) {
            let kind = u32_at(p, 0).unwrap_or(0);
            let (offset, vaddr, filesz, memsz) = (
                u64_at(p, 8).unwrap_or(0),
                u64_at(p, 16).unwrap_or(0),
                u64_at(p, 32).unwrap_or(0),
                u64_at(p, 40).unwrap_or(0),
            );
            match kind {
                PT_LOAD => core.loads.push(Load {
                    addr: vaddr as usize,
                    mem_size: memsz as usize,
                    offset,
                    file_size: filesz as usize,
                }),
                PT_NOTE if filesz <= MAX_NOTES - notes_read => {
                    notes_read += filesz;
                    // What the core holds of them: the notes whole in it are
                    // read, those cut are not.
                    let end = offset.saturating_add(filesz);
                    let held = len.saturating_sub(offset).min(filesz);
                    notes_end = notes_end.max(end);
                    core.notes_cut |= held < filesz;
                    let mut notes = vec![0u8; held as usize];
                    core.file.read_exact_at(&mut notes, offset).map_err(|_| not_core())?;
                    core.read_notes(&notes);
                }
                _ => {}
            }
        }
        if core.threads.is_empty() {
            if core.notes_cut {
                return Err(cut("notes (which hold the threads' registers)", notes_end));
            }
            return Err(Error::BadArgument(format!(
                "{path} has no thread (no NT_PRSTATUS note): not a process's core"
            )));
        }
        Ok(core)
    }

    /// What of the process the core does not hold because it is cut short
    /// (None: it is whole): its size, where its contents end, the share of
    /// the memory it holds that is missing, and whether threads are.
    pub fn damage(&self) -> Option<String> {
        let (mut total, mut missing, mut end) = (0u64, 0u64, 0u64);
        for l in &self.loads {
            total = total.saturating_add(l.file_size as u64);
            missing = missing.saturating_add(l.file_size as u64 - l.held(self.len));
            end = end.max(l.offset.saturating_add(l.file_size as u64));
        }
        if missing == 0 && !self.notes_cut {
            return None;
        }
        let mut why =
            format!("the core file is cut short: it has {} bytes, its contents reach byte {end}", self.len);
        if missing > 0 {
            // (Rounded up: a little missing is not "0%".)
            let share = (missing as f64 / total.max(1) as f64 * 100.0).ceil();
            why.push_str(&format!(
                "; {share}% of the memory it holds is missing (the stacks, or R's state, may be in it)"
            ));
        }
        if self.notes_cut {
            why.push_str("; its notes are cut, so some threads are missing");
        }
        Some(why)
    }

    fn read_notes(&mut self, notes: &[u8]) {
        let mut at = 0;
        while at + 12 <= notes.len() {
            let (Some(namesz), Some(descsz), Some(kind)) =
                (u32_at(notes, at), u32_at(notes, at + 4), u32_at(notes, at + 8))
            else {
                break;
            };
            let desc_at = at + 12 + (namesz as usize).div_ceil(4) * 4;
            let next = desc_at + (descsz as usize).div_ceil(4) * 4;
            let Some(desc) = notes.get(desc_at..desc_at + descsz as usize) else { break };
            match kind {
                NT_PRSTATUS => self.prstatus(desc),
                NT_PRPSINFO => {
                    self.pid = u32_at(desc, 24).unwrap_or(0) as i32;
                    let name = desc.get(40..56).unwrap_or(&[]);
                    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                    self.name = String::from_utf8_lossy(&name[..end]).into_owned();
                }
                NT_AUXV => {
                    for pair in desc.chunks_exact(16) {
                        match u64_at(pair, 0) {
                            Some(AT_PHDR) => self.phdr = u64_at(pair, 8).unwrap_or(0) as usize,
                            Some(AT_SYSINFO_EHDR) => self.vdso = u64_at(pair, 8).unwrap_or(0) as usize,
                            _ => {}
                        }
                    }
                }
                NT_FILE => self.nt_file(desc),
                _ => {}
            }
            at = next;
        }
    }

    /// A thread: its id and registers (`struct elf_prstatus` on x86_64).
    fn prstatus(&mut self, d: &[u8]) {
        const REGS: usize = 112;
        let reg = |i: usize| u64_at(d, REGS + 8 * i).unwrap_or(0) as usize;
        let tid = u32_at(d, 32).unwrap_or(0) as i32;
        // user_regs_struct: rbp is the 5th register, rip the 17th, rsp the 20th.
        // (Whether it was waiting is not kept: a dump shows every thread.)
        self.threads.push(Thread {
            tid,
            name: String::new(),
            regs: (reg(16), reg(19), reg(4)),
            waiting: false,
        });
    }

    fn nt_file(&mut self, d: &[u8]) {
        let (Some(count), Some(page)) = (u64_at(d, 0), u64_at(d, 8)) else { return };
        let count = count.min(1 << 20) as usize;
        let names_at = 16 + 24 * count;
        let Some(names) = d.get(names_at..) else { return };
        let mut names = names.split(|&b| b == 0);
        for i in 0..count {
            let e = 16 + 24 * i;
            let (Some(start), Some(end), Some(off)) = (u64_at(d, e), u64_at(d, e + 8), u64_at(d, e + 16))
            else {
                return;
            };
            let name = String::from_utf8_lossy(names.next().unwrap_or(&[])).into_owned();
            self.files.push((start as usize, end as usize, off * page, name));
        }
    }

    /// The process's mappings as `/proc/PID/maps` would list them: the
    /// files mapped, and the vDSO.
    pub fn maps(&self) -> Vec<Mapping> {
        let mut out: Vec<Mapping> = self
            .files
            .iter()
            .map(|(start, end, off, path)| Mapping {
                start: *start,
                end: *end,
                perms: Perms { read: true, ..Perms::default() },
                offset: *off as usize,
                dev: 0,
                inode: 0,
                path: path.clone(),
            })
            .collect();
        if self.vdso != 0 {
            if let Some(l) = self.loads.iter().find(|l| l.addr == self.vdso) {
                out.push(Mapping {
                    start: l.addr,
                    end: l.addr + l.mem_size,
                    perms: Perms { read: true, exec: true, ..Perms::default() },
                    offset: 0,
                    dev: 0,
                    inode: 0,
                    path: "[vdso]".into(),
                });
            }
        }
        out.sort_by_key(|m| m.start);
        out
    }

    /// The memory ranges the core holds (a thread's stack is one), as far
    /// as it goes.
    pub fn ranges(&self) -> Vec<(usize, usize)> {
        self.loads
            .iter()
            .map(|l| (l.addr, l.held(self.len) as usize))
            .filter(|&(_, held)| held > 0)
            .map(|(a, held)| (a, a + held))
            .collect()
    }

    /// The executable's path: the file mapped where its program headers
    /// were.
    pub fn exe(&self) -> Option<String> {
        self.files.iter().find(|f| f.0 <= self.phdr && self.phdr < f.1).map(|f| f.3.clone())
    }

    /// Reads bytes of the file `path` the process had mapped: a regular
    /// file only (see `crate::files`; the core names the paths, and a path
    /// may be a FIFO or a device now), opened once.
    fn read_file(&self, path: &str, offset: u64, buf: &mut [u8]) -> bool {
        let mut opened = self.opened.borrow_mut();
        let f = opened.entry(path.to_string()).or_insert_with(|| {
            crate::files::open_input(Path::new(path), "mapped file", u64::MAX).ok().map(|i| i.file)
        });
        f.as_ref().is_some_and(|f| f.read_exact_at(buf, offset).is_ok())
    }
}

impl Memory for Core {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let mut done = 0;
        while done < buf.len() {
            let a = addr + done;
            // The core's own bytes first (what the process had in memory);
            // those a core cut short lacks are not read from elsewhere.
            if let Some(l) = self.loads.iter().find(|l| l.addr <= a && a - l.addr < l.file_size) {
                let held = l.held(self.len) as usize;
                if a - l.addr >= held {
                    return false;
                }
                let n = (held - (a - l.addr)).min(buf.len() - done);
                if self.file.read_exact_at(&mut buf[done..done + n], l.offset + (a - l.addr) as u64).is_err()
                {
                    return false;
                }
                done += n;
                continue;
            }
            // Then the mapped file's bytes (code and read-only data, which
            // a core leaves out).
            let Some((start, end, off, path)) = self.files.iter().find(|f| f.0 <= a && a < f.1) else {
                return false;
            };
            let n = (end - a).min(buf.len() - done);
            if !self.read_file(path, off + (a - start) as u64, &mut buf[done..done + n]) {
                return false;
            }
            done += n;
        }
        true
    }

    fn bulk(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic x86_64 core: its threads `(tid, rip, rsp, rbp)`, the
    /// process id, and loadable segments `(address, bytes)`; the notes
    /// first, then the segments, as the kernel lays them out.
    fn image(threads: &[(u32, u64, u64, u64)], pid: u32, loads: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let note = |kind: u32, desc: Vec<u8>| {
            let mut n = Vec::new();
            n.extend(5u32.to_le_bytes());
            n.extend((desc.len() as u32).to_le_bytes());
            n.extend(kind.to_le_bytes());
            n.extend(b"CORE\0\0\0\0");
            n.extend(&desc);
            n.resize(n.len().div_ceil(4) * 4, 0);
            n
        };
        let mut notes = Vec::new();
        for &(tid, rip, rsp, rbp) in threads {
            let mut d = vec![0u8; 336];
            d[32..36].copy_from_slice(&tid.to_le_bytes());
            for (i, v) in [(4, rbp), (16, rip), (19, rsp)] {
                d[112 + 8 * i..120 + 8 * i].copy_from_slice(&v.to_le_bytes());
            }
            notes.extend(note(NT_PRSTATUS, d));
        }
        let mut ps = vec![0u8; 136];
        ps[24..28].copy_from_slice(&pid.to_le_bytes());
        ps[40..41].copy_from_slice(b"R");
        notes.extend(note(NT_PRPSINFO, ps));
        let phnum = 1 + loads.len();
        let notes_at = 64 + 56 * phnum as u64;
        let mut out = vec![0u8; 64];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = 2;
        out[5] = 1;
        out[16..18].copy_from_slice(&4u16.to_le_bytes());
        out[18..20].copy_from_slice(&62u16.to_le_bytes());
        out[32..40].copy_from_slice(&64u64.to_le_bytes());
        out[54..56].copy_from_slice(&56u16.to_le_bytes());
        out[56..58].copy_from_slice(&(phnum as u16).to_le_bytes());
        let phdr = |kind: u32, offset: u64, addr: u64, size: u64| {
            let mut p = vec![0u8; 56];
            p[..4].copy_from_slice(&kind.to_le_bytes());
            p[8..16].copy_from_slice(&offset.to_le_bytes());
            p[16..24].copy_from_slice(&addr.to_le_bytes());
            p[32..40].copy_from_slice(&size.to_le_bytes());
            p[40..48].copy_from_slice(&size.to_le_bytes());
            p
        };
        out.extend(phdr(PT_NOTE, notes_at, 0, notes.len() as u64));
        let mut at = notes_at + notes.len() as u64;
        for (addr, bytes) in loads {
            out.extend(phdr(PT_LOAD, at, *addr, bytes.len() as u64));
            at += bytes.len() as u64;
        }
        out.extend(notes);
        for (_, bytes) in loads {
            out.extend(bytes);
        }
        out
    }

    /// `bytes` written to a file of this test's own; its path.
    fn file(name: &str, bytes: &[u8]) -> String {
        let path = std::env::temp_dir().join(format!("winch-core-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn two_threads() -> Vec<u8> {
        let stack: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let heap = vec![7u8; 4096];
        image(
            &[(42, 0x1000, 0x7000_0100, 0x7000_0200), (43, 0x1010, 0x7000_1100, 0)],
            42,
            &[(0x5000_0000, heap), (0x7000_0000, stack)],
        )
    }

    #[test]
    fn a_whole_core_gives_its_threads_and_memory_and_no_damage() {
        let img = two_threads();
        let path = file("whole", &img);
        let core = Core::open(&path).unwrap();
        assert_eq!((core.pid, core.name.as_str()), (42, "R"));
        let regs: Vec<_> = core.threads.iter().map(|t| (t.tid, t.regs)).collect();
        assert_eq!(regs, [(42, (0x1000, 0x7000_0100, 0x7000_0200)), (43, (0x1010, 0x7000_1100, 0))]);
        assert_eq!(core.damage(), None);
        assert_eq!(core.ranges(), [(0x5000_0000, 0x5000_1000), (0x7000_0000, 0x7000_2000)]);
        let mut b = [0u8; 4];
        assert!(core.read(0x7000_1ffc, &mut b));
        assert_eq!(b, [8188 % 251, 8189 % 251, 8190 % 251, 8191 % 251].map(|x| x as u8));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_core_cut_inside_its_memory_is_read_as_far_as_it_goes_and_says_what_is_missing() {
        let img = two_threads();
        // Cut in the middle of the stack segment (the last): 4096 of its
        // 8192 bytes and all of the heap remain.
        let path = file("cut-memory", &img[..img.len() - 4096]);
        let core = Core::open(&path).unwrap();
        assert_eq!(core.threads.len(), 2);
        let why = core.damage().expect("a cut core says so");
        assert!(why.contains("cut short"), "{why}");
        assert!(why.contains(&format!(
            "it has {} bytes, its contents reach byte {}",
            img.len() - 4096,
            img.len()
        )));
        // 4096 of 12288 bytes: 34% (rounded up).
        assert!(why.contains("34% of the memory it holds is missing"), "{why}");
        assert!(!why.contains("threads are missing"), "{why}");
        assert_eq!(core.ranges(), [(0x5000_0000, 0x5000_1000), (0x7000_0000, 0x7000_1000)]);
        let mut b = [0u8; 8];
        assert!(core.read(0x7000_0ff8, &mut b), "the part the core holds");
        assert!(!core.read(0x7000_1000, &mut b), "the part it lost");
        assert!(!core.read(0x7000_0ffc, &mut b), "across the end");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_core_cut_inside_its_notes_keeps_the_threads_it_holds_or_is_refused_if_none() {
        let img = two_threads();
        let notes_at = 64 + 56 * 3;
        // The first thread's note (12 + 8 + 336 bytes) whole, the second's
        // cut.
        let path = file("cut-notes", &img[..notes_at + 356 + 100]);
        let core = Core::open(&path).unwrap();
        assert_eq!(core.threads.iter().map(|t| t.tid).collect::<Vec<_>>(), [42]);
        let why = core.damage().unwrap();
        assert!(why.contains("its notes are cut, so some threads are missing"), "{why}");
        assert!(why.contains("100% of the memory it holds is missing"), "{why}");
        std::fs::remove_file(&path).unwrap();
        // No thread's note whole: nothing to read, and the error says why.
        let path = file("cut-first-note", &img[..notes_at + 100]);
        let err = Core::open(&path).err().unwrap().to_string();
        assert!(err.contains("is cut short") && err.contains("notes"), "{err}");
        std::fs::remove_file(&path).unwrap();
        // Cut in the program headers.
        let path = file("cut-headers", &img[..100]);
        let err = Core::open(&path).err().unwrap().to_string();
        assert!(err.contains("is cut short") && err.contains("program headers"), "{err}");
        std::fs::remove_file(&path).unwrap();
        // Cut in the ELF header: not a core at all, as far as can be told.
        let path = file("cut-ehdr", &img[..40]);
        let err = Core::open(&path).err().unwrap().to_string();
        assert!(err.contains("not an ELF core file"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }
}
