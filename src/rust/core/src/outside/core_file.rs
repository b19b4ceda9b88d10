//! A core file as a process to read: its threads' registers (`NT_PRSTATUS`
//! notes), its memory (the core's loadable segments, and for what the
//! kernel did not dump, such as code, the mapped files' bytes on disk as
//! the `NT_FILE` note lists them) and its mappings.

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

/// A core file opened for reading.
pub struct Core {
    file: File,
    /// Loadable segments: (address, size in memory, offset in the core,
    /// size in the core).
    loads: Vec<(usize, usize, u64, usize)>,
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

impl Core {
    /// Opens the core file at `path`: a classed error when it is missing,
    /// not a regular file (see `crate::files`) or not an x86_64 ELF core.
    /// Its size is not bounded: it is read in bounded parts (the headers,
    /// at most [`MAX_NOTES`] of notes, then what a dump asks for).
    pub fn open(path: &str) -> Result<Core> {
        let file = crate::files::open_input(Path::new(path), "core file", u64::MAX)?.file;
        let not_core = || Error::BadArgument(format!("{path} is not an ELF core file of an x86_64 process"));
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
        file.read_exact_at(&mut ph, phoff).map_err(|_| not_core())?;
        let mut core = Core {
            file,
            loads: Vec::new(),
            files: Vec::new(),
            opened: RefCell::new(HashMap::new()),
            pid: 0,
            name: String::new(),
            threads: Vec::new(),
            phdr: 0,
            vdso: 0,
        };
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
                PT_LOAD => core.loads.push((vaddr as usize, memsz as usize, offset, filesz as usize)),
                PT_NOTE if filesz <= MAX_NOTES - notes_read => {
                    notes_read += filesz;
                    let mut notes = vec![0u8; filesz as usize];
                    core.file.read_exact_at(&mut notes, offset).map_err(|_| not_core())?;
                    core.read_notes(&notes);
                }
                _ => {}
            }
        }
        if core.threads.is_empty() {
            return Err(Error::BadArgument(format!(
                "{path} has no thread (no NT_PRSTATUS note): not a process's core"
            )));
        }
        Ok(core)
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
        self.threads.push(Thread { tid, name: String::new(), regs: (reg(16), reg(19), reg(4)) });
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
            if let Some(&(a, size, _, _)) = self.loads.iter().find(|l| l.0 == self.vdso) {
                out.push(Mapping {
                    start: a,
                    end: a + size,
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

    /// The memory ranges the core holds (a thread's stack is one).
    pub fn ranges(&self) -> Vec<(usize, usize)> {
        self.loads.iter().filter(|l| l.3 > 0).map(|l| (l.0, l.0 + l.3)).collect()
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
            // The core's own bytes first (what the process had in memory).
            if let Some(&(start, _, off, filesz)) = self.loads.iter().find(|l| l.0 <= a && a < l.0 + l.3) {
                let n = (start + filesz - a).min(buf.len() - done);
                if self.file.read_exact_at(&mut buf[done..done + n], off + (a - start) as u64).is_err() {
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
