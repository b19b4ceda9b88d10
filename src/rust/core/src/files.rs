//! Opening the files winch reads and writes so that nothing blocks or runs
//! without end: only regular files are read or written. A path is looked
//! at first, and a FIFO, device, socket or directory is refused without
//! being opened (opening a FIFO waits for its other end; opening a device
//! can act on it). What is then opened is opened with `O_NONBLOCK`, so
//! that a FIFO put there in between fails or returns at once instead of
//! waiting, and is checked again with `fstat` on the descriptor: the check
//! and the use are of the same file. Reads are bounded by the size `fstat`
//! gave (and by the caller's limit), so a file that grows is not followed.
//!
//! Reading a file refused here is a `BadArgument` (the user named the
//! wrong kind of file); writing one is `Io`, the class winch's writers
//! already use for a path they cannot write (a directory, a full disk).

use crate::error::{Error, Result};
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// The largest ELF file (an executable or a library) winch reads: larger
/// ones are not programs (R's own library is a few MB, 100 MB with its
/// debug information). R's checks state the same bound (`elf_max_bytes`,
/// R/utils.R).
pub const MAX_ELF: u64 = 4 << 30;

/// What a path names, as far as reading and writing it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Regular,
    Directory,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
    Other,
}

impl Kind {
    /// The kind of file `meta` describes.
    pub fn of(meta: &Metadata) -> Kind {
        let t = meta.file_type();
        if t.is_file() {
            return Kind::Regular;
        }
        if t.is_dir() {
            return Kind::Directory;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                return Kind::Fifo;
            }
            if t.is_char_device() {
                return Kind::CharDevice;
            }
            if t.is_block_device() {
                return Kind::BlockDevice;
            }
            if t.is_socket() {
                return Kind::Socket;
            }
        }
        Kind::Other
    }

    /// Its name for R (`rs_file_kind()`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Regular => "file",
            Kind::Directory => "directory",
            Kind::Fifo => "fifo",
            Kind::CharDevice => "character device",
            Kind::BlockDevice => "block device",
            Kind::Socket => "socket",
            Kind::Other => "other",
        }
    }

    /// As messages say it: "a FIFO (named pipe)".
    pub fn described(self) -> &'static str {
        match self {
            Kind::Regular => "a regular file",
            Kind::Directory => "a directory",
            Kind::Fifo => "a FIFO (named pipe)",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Socket => "a socket",
            Kind::Other => "not a regular file",
        }
    }
}

/// The kind of what `path` names (symbolic links followed) and its size.
pub fn kind(path: &Path) -> io::Result<(Kind, u64)> {
    let meta = std::fs::metadata(path)?;
    Ok((Kind::of(&meta), meta.len()))
}

/// A regular file opened to be read, and its size when it was opened.
#[derive(Debug)]
pub struct Input {
    pub file: File,
    pub size: u64,
}

/// Opens `path` to be read, as the module doc says: a regular file of at
/// most `max` bytes. `what` names it in errors ("core file").
pub fn open_input(path: &Path, what: &str, max: u64) -> Result<Input> {
    let shown = path.display();
    let refused = |k: Kind| {
        Error::BadArgument(format!(
            "the {what} {shown} is {}: only a regular file can be read",
            k.described()
        ))
    };
    match kind(path) {
        Ok((Kind::Regular, _)) => {}
        Ok((k, _)) => return Err(refused(k)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::BadArgument(format!("the {what} {shown} does not exist")))
        }
        Err(e) => return Err(Error::BadArgument(format!("cannot open the {what} {shown}: {e}"))),
    }
    let mut options = OpenOptions::new();
    options.read(true);
    let cannot = |e: io::Error| Error::BadArgument(format!("cannot open the {what} {shown}: {e}"));
    let (file, size) = match open_regular(path, &mut options).map_err(cannot)? {
        Opened::Regular(file, size) => (file, size),
        Opened::Not(k) => return Err(refused(k)),
    };
    if size > max {
        return Err(Error::BadArgument(format!(
            "the {what} {shown} is larger than {} (it has {size} bytes): not a file of that kind",
            bytes(max)
        )));
    }
    Ok(Input { file, size })
}

/// The bytes of the regular file `path` (see [`open_input`]), at most
/// `max`: no more than its size when it was opened.
pub fn read_input(path: &Path, what: &str, max: u64) -> Result<Vec<u8>> {
    let Input { file, size } = open_input(path, what, max)?;
    read_opened(file, size)
        .map_err(|e| Error::BadArgument(format!("cannot read the {what} {}: {e}", path.display())))
}

/// The first `size` bytes of `file` (fewer if it shrank).
pub fn read_opened(file: File, size: u64) -> io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(size).read_to_end(&mut data)?;
    Ok(data)
}

/// Opens `path` to be written, as the module doc says: an existing
/// regular file (emptied) or a new one. Errors are `Io`.
pub fn create_output(path: &Path) -> Result<File> {
    let shown = path.display();
    let refused = |k: Kind| {
        Error::Io(format!("cannot write {shown}: it is {}; winch writes regular files only", k.described()))
    };
    match kind(path) {
        Ok((Kind::Regular, _)) => {}
        Ok((k, _)) => return Err(refused(k)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {} // made below
        Err(e) => return Err(Error::Io(format!("cannot write {shown}: {e}"))),
    }
    let mut options = OpenOptions::new();
    // Not truncated when opened: only once it is known to be a regular file.
    options.write(true).create(true);
    let file = match open_regular(path, &mut options) {
        Ok(Opened::Regular(file, _)) => file,
        Ok(Opened::Not(k)) => return Err(refused(k)),
        // (A FIFO without a reader, put there since it was looked at.)
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(refused(Kind::Fifo)),
        Err(e) => return Err(Error::Io(format!("cannot write {shown}: {e}"))),
    };
    file.set_len(0).map_err(|e| Error::Io(format!("cannot write {shown}: {e}")))?;
    Ok(file)
}

/// What [`open_regular`] opened.
enum Opened {
    /// A regular file, with its size.
    Regular(File, u64),
    /// Something else, closed again.
    Not(Kind),
}

/// Opens `path` with `options` and `O_NONBLOCK` (a FIFO without a writer
/// then opens at once, and one without a reader fails to open for writing
/// with `ENXIO`), and checks what was opened with `fstat`: a regular file
/// is returned with `O_NONBLOCK` cleared.
fn open_regular(path: &Path, options: &mut OpenOptions) -> io::Result<Opened> {
    nonblocking(options);
    let file = options.open(path)?;
    let meta = file.metadata()?;
    match Kind::of(&meta) {
        Kind::Regular => {
            blocking(&file)?;
            Ok(Opened::Regular(file, meta.len()))
        }
        k => Ok(Opened::Not(k)),
    }
}

/// `n` bytes in words ("4 GiB").
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n => format!("{n} bytes"),
    }
}

/// Opens with `O_NONBLOCK` (and `O_NOCTTY`: a terminal never becomes R's
/// controlling one); `O_CLOEXEC` is the standard library's own.
fn nonblocking(options: &mut OpenOptions) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    #[cfg(not(unix))]
    let _ = options;
}

/// Clears `O_NONBLOCK` again: reads and writes of the regular file then
/// are ordinary ones.
fn blocking(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl(F_GETFL) on a descriptor this File owns and keeps
        // open for the call; it reads the flags only.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above; F_SETFL changes only the status flags of the
        // open file description, which this File alone uses.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    /// A fresh directory of this test's own, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("winch-files-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir(&p).unwrap();
            Dir(p)
        }
        fn fifo(&self, name: &str) -> PathBuf {
            let p = self.0.join(name);
            let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: mkfifo reads the NUL-terminated path only.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn bad_argument(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::BadArgument(m)) => m,
            other => panic!("expected a BadArgument error, got {other:?}"),
        }
    }

    fn io_error(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::Io(m)) => m,
            other => panic!("expected an Io error, got {other:?}"),
        }
    }

    #[test]
    fn kinds_are_told_apart() {
        let d = Dir::new("kinds");
        let file = d.0.join("f");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(kind(&file).unwrap(), (Kind::Regular, 3));
        assert_eq!(kind(&d.0).unwrap().0, Kind::Directory);
        assert_eq!(kind(&d.fifo("p")).unwrap().0, Kind::Fifo);
        assert_eq!(kind(Path::new("/dev/zero")).unwrap().0, Kind::CharDevice);
        // A symbolic link is followed.
        let link = d.0.join("l");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        assert_eq!(kind(&link).unwrap().0, Kind::CharDevice);
        assert_eq!(kind(&d.0.join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_regular_file_is_read_whole_and_no_further_than_its_size() {
        let d = Dir::new("read");
        let file = d.0.join("f");
        std::fs::write(&file, b"hello").unwrap();
        assert_eq!(read_input(&file, "file", 100).unwrap(), b"hello");
        let opened = open_input(&file, "file", 5).unwrap();
        assert_eq!(opened.size, 5);
        // Grown after it was opened: the size then is what is read.
        std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(b" world").unwrap();
        assert_eq!(read_opened(opened.file, opened.size).unwrap(), b"hello");
        // Larger than the limit: refused with the limit.
        let m = bad_argument(open_input(&file, "executable", 4));
        assert!(m.contains("larger than 4 bytes"), "{m}");
    }

    #[test]
    fn fifos_devices_directories_and_missing_files_are_refused_at_once() {
        let d = Dir::new("refuse");
        let fifo = d.fifo("p");
        let started = Instant::now();
        let m = bad_argument(open_input(&fifo, "core file", u64::MAX));
        assert!(m.contains("is a FIFO (named pipe)") && m.contains("core file"), "{m}");
        let m = bad_argument(open_input(Path::new("/dev/zero"), "executable", MAX_ELF));
        assert!(m.contains("a character device"), "{m}");
        let m = bad_argument(open_input(&d.0, "executable", MAX_ELF));
        assert!(m.contains("a directory"), "{m}");
        let m = bad_argument(open_input(&d.0.join("missing"), "executable", MAX_ELF));
        assert!(m.contains("does not exist"), "{m}");
        let m = bad_argument(read_input(&d.0.join("no").join("dir"), "executable", MAX_ELF));
        assert!(m.contains("does not exist"), "{m}");
        // Written: the same, as I/O errors.
        let m = io_error(create_output(&fifo));
        assert!(m.contains("a FIFO (named pipe)"), "{m}");
        let m = io_error(create_output(Path::new("/dev/null")));
        assert!(m.contains("a character device"), "{m}");
        let m = io_error(create_output(&d.0));
        assert!(m.contains("a directory"), "{m}");
        assert!(started.elapsed() < Duration::from_secs(5), "nothing waited");
    }

    #[test]
    fn a_fifo_put_in_place_after_the_look_cannot_block_the_open() {
        // What the look first cannot see: the check of what was opened. A
        // FIFO without a writer opens at once and is refused; without a
        // reader, opening it to write fails at once.
        let d = Dir::new("race");
        let fifo = d.fifo("p");
        let started = Instant::now();
        let read = open_regular(&fifo, OpenOptions::new().read(true)).unwrap();
        assert!(matches!(read, Opened::Not(Kind::Fifo)));
        let write = open_regular(&fifo, OpenOptions::new().write(true));
        assert_eq!(write.err().and_then(|e| e.raw_os_error()), Some(libc::ENXIO));
        let dev = open_regular(Path::new("/dev/zero"), OpenOptions::new().read(true)).unwrap();
        assert!(matches!(dev, Opened::Not(Kind::CharDevice)));
        assert!(started.elapsed() < Duration::from_secs(5), "nothing waited");
        // A regular file: opened, blocking again.
        let file = d.0.join("f");
        std::fs::write(&file, b"abc").unwrap();
        let Opened::Regular(f, 3) = open_regular(&file, OpenOptions::new().read(true)).unwrap() else {
            panic!("a regular file of 3 bytes")
        };
        use std::os::fd::AsRawFd;
        // SAFETY: F_GETFL on a descriptor the File owns.
        let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
    }

    #[test]
    fn an_output_is_a_new_file_or_an_existing_one_emptied() {
        let d = Dir::new("write");
        let new = d.0.join("new");
        let mut f = create_output(&new).unwrap();
        f.write_all(b"one").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&new).unwrap(), b"one");
        let mut f = create_output(&new).unwrap();
        f.write_all(b"2").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&new).unwrap(), b"2");
        // In a directory that does not exist: the system's reason.
        let m = io_error(create_output(&d.0.join("no").join("file")));
        assert!(m.contains("No such file"), "{m}");
    }
}
