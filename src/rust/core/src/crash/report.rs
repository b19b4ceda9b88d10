//! Writing the crash report without allocating: a fixed buffer flushed to a
//! sink (the signal handler's sink calls `write(2)`), ASCII only, every
//! string cut to a bound, and at most [`MAX_NATIVE`] native frames and
//! [`MAX_R`] R calls.

/// Native frames shown at most.
pub const MAX_NATIVE: usize = 100;
/// R calls shown at most.
pub const MAX_R: usize = 100;
/// Bytes of one name (function, module, R call) shown at most.
pub const MAX_NAME: usize = 200;

/// A buffered writer over a sink.
pub struct Out<W: FnMut(&[u8])> {
    buf: [u8; 512],
    len: usize,
    sink: W,
}

impl<W: FnMut(&[u8])> Out<W> {
    pub fn new(sink: W) -> Out<W> {
        Out { buf: [0; 512], len: 0, sink }
    }

    /// Bytes, with anything but printable ASCII shown as `?`.
    pub fn bytes(&mut self, s: &[u8]) {
        for &b in s {
            self.byte(if (0x20..0x7f).contains(&b) { b } else { b'?' });
        }
    }

    fn byte(&mut self, b: u8) {
        if self.len == self.buf.len() {
            self.flush();
        }
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// A name, cut to [`MAX_NAME`] bytes (marked with `...`).
    pub fn name(&mut self, s: &[u8]) {
        if s.len() > MAX_NAME {
            self.bytes(&s[..MAX_NAME - 3]);
            self.bytes(b"...");
        } else {
            self.bytes(s);
        }
    }

    /// The report's own text (newlines kept).
    pub fn text(&mut self, s: &str) {
        for &b in s.as_bytes() {
            self.byte(b);
        }
    }

    /// `0x` and 16 lowercase hex digits.
    pub fn hex(&mut self, v: usize) {
        let mut d = [0u8; 18];
        d[0] = b'0';
        d[1] = b'x';
        for (k, c) in d[2..].iter_mut().enumerate() {
            let nibble = (v >> (60 - 4 * k)) & 0xf;
            *c = b"0123456789abcdef"[nibble];
        }
        self.bytes(&d);
    }

    /// `0x` and as few hex digits as needed.
    pub fn short_hex(&mut self, v: usize) {
        let mut d = [0u8; 16];
        let mut k = d.len();
        let mut m = v;
        loop {
            k -= 1;
            d[k] = b"0123456789abcdef"[m & 0xf];
            m >>= 4;
            if m == 0 {
                break;
            }
        }
        self.bytes(b"0x");
        self.bytes(&d[k..]);
    }

    pub fn dec(&mut self, v: usize) {
        let mut d = [0u8; 20];
        let mut k = d.len();
        let mut m = v;
        loop {
            k -= 1;
            d[k] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        self.bytes(&d[k..]);
    }

    pub fn flush(&mut self) {
        if self.len > 0 {
            (self.sink)(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

/// What the report's first line says.
#[derive(Clone, Copy, Debug, Default)]
pub struct Header {
    pub signal: i32,
    /// The faulting address (hardware faults sent by the kernel).
    pub address: Option<usize>,
    pub main_thread: bool,
}

/// The native frames a report shows: their instruction pointers,
/// innermost first, whether the walk counted every frame (it fills its
/// buffer, then stops counting), and why it ended early.
#[derive(Clone, Copy, Debug)]
pub struct NativeFrames<'a> {
    pub ips: &'a [usize],
    pub counted_all: bool,
    pub stopped: Option<&'a str>,
}

/// The R calls a report shows: the native frame that owns each
/// (`owners[k]` for call `k`, innermost first), and whether every call was
/// counted.
#[derive(Clone, Copy, Debug)]
pub struct RCalls<'a> {
    pub owners: &'a [usize],
    pub counted_all: bool,
}

/// Writes the report: the header, then the native frames innermost first
/// (`describe(i, out)` writes frame `i`'s module, function and offset),
/// each followed by the R calls whose contexts it owns (`label(k, out)`
/// writes call `k`'s label).
pub fn write<W: FnMut(&[u8])>(
    out: &mut Out<W>,
    header: Header,
    native: NativeFrames,
    mut describe: impl FnMut(usize, &mut Out<W>),
    r: RCalls,
    mut label: impl FnMut(usize, &mut Out<W>),
) {
    let NativeFrames { ips, counted_all: all_native, stopped } = native;
    let RCalls { owners, counted_all: all_r } = r;
    let (name, what) = super::signal_name(header.signal);
    out.text("\n*** winch: ");
    out.text(name);
    out.text(" (");
    out.text(what);
    out.text(")");
    if let Some(a) = header.address {
        out.text(", address ");
        out.hex(a);
    }
    if header.main_thread {
        out.text(", in R's main thread\n");
        out.text("*** native frames and the R calls that led there, innermost first:\n");
    } else {
        out.text(", in a thread other than R's main thread\n");
        out.text("*** native frames, innermost first (R's calls are not this thread's):\n");
    }
    let shown = ips.len().min(MAX_NATIVE);
    // R calls from `k` on owned by frames up to `upto`; the first MAX_R
    // calls are written, the others only counted (by `k`).
    let mut r_calls = |k: &mut usize, upto: usize, out: &mut Out<W>| {
        while *k < owners.len() && owners[*k] <= upto {
            if *k < MAX_R {
                out.text("        R  ");
                label(*k, out);
                out.text("\n");
            }
            *k += 1;
        }
    };
    let mut k = 0;
    for (i, &ip) in ips.iter().enumerate().take(shown) {
        out.text("  #");
        out.dec(i);
        out.text(if i < 10 {
            "   "
        } else if i < 100 {
            "  "
        } else {
            " "
        });
        out.hex(ip);
        out.text("  ");
        describe(i, out);
        out.text("\n");
        r_calls(&mut k, i, out);
        out.flush();
    }
    if ips.len() > shown {
        // A walk that filled its buffer counted only that many.
        out.text(if all_native { "  [" } else { "  [at least " });
        out.dec(ips.len() - shown);
        out.text(" more native frames not shown]\n");
    }
    // R calls owned by frames not shown (or when the walk found none).
    r_calls(&mut k, usize::MAX, out);
    if k > MAX_R {
        out.text(if all_r { "  [" } else { "  [at least " });
        out.dec(k - MAX_R);
        out.text(" more R calls not shown]\n");
    }
    if let Some(why) = stopped {
        out.text("  [the native stack ends here: ");
        out.text(why);
        out.text("]\n");
    }
    out.text("*** end of winch's report\n");
    out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    type Sink<'a> = &'a mut dyn FnMut(&[u8]);

    fn render(f: impl FnOnce(&mut Out<Sink>)) -> String {
        let mut text = Vec::new();
        {
            let mut sink = |b: &[u8]| text.extend_from_slice(b);
            let mut out: Out<Sink> = Out::new(&mut sink);
            f(&mut out);
            out.flush();
        }
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn numbers_and_strings() {
        let s = render(|o| {
            o.hex(0x1234);
            o.text(" ");
            o.short_hex(0x1f);
            o.text(" ");
            o.short_hex(0);
            o.text(" ");
            o.dec(0);
            o.text(" ");
            o.dec(1234567);
            o.text(" ");
            o.bytes("é\n\u{7f}".as_bytes());
        });
        assert_eq!(s, "0x0000000000001234 0x1f 0x0 0 1234567 ????");
        let long = "x".repeat(1000);
        let s = render(|o| o.name(long.as_bytes()));
        assert_eq!(s.len(), MAX_NAME);
        assert!(s.ends_with("xx..."));
        // More than the buffer holds goes through in pieces.
        let s = render(|o| o.text(&"y".repeat(2000)));
        assert_eq!(s.len(), 2000);
    }

    #[test]
    fn frames_with_their_r_calls() {
        let ips = [0x10, 0x20, 0x30];
        let s = render(|o| {
            write(
                o,
                Header { signal: libc::SIGSEGV, address: Some(0), main_thread: true },
                NativeFrames { ips: &ips, counted_all: true, stopped: None },
                |i, o| o.text(["crash.so  deref + 0x4", "crash.so  caller + 0x9", "libR.so  +0x100"][i]),
                RCalls { owners: &[1, 2, 2], counted_all: true },
                |k, o| o.text([".Call()", "g()", "f()"][k]),
            )
        });
        let want = "
*** winch: SIGSEGV (segmentation fault), address 0x0000000000000000, in R's main thread
*** native frames and the R calls that led there, innermost first:
  #0   0x0000000000000010  crash.so  deref + 0x4
  #1   0x0000000000000020  crash.so  caller + 0x9
        R  .Call()
  #2   0x0000000000000030  libR.so  +0x100
        R  g()
        R  f()
*** end of winch's report
";
        assert_eq!(s, want);
    }

    #[test]
    fn bounded_output_and_other_threads() {
        let ips = vec![0x10usize; MAX_NATIVE + 20];
        let owners: Vec<usize> = (0..MAX_R + 5).map(|_| MAX_NATIVE + 10).collect();
        let s = render(|o| {
            write(
                o,
                Header { signal: libc::SIGABRT, address: None, main_thread: true },
                NativeFrames { ips: &ips, counted_all: true, stopped: Some("no unwind information") },
                |_, o| o.text("f"),
                RCalls { owners: &owners, counted_all: true },
                |_, o| o.text("g()"),
            )
        });
        assert_eq!(s.matches("  #").count(), MAX_NATIVE);
        assert!(s.contains("[20 more native frames not shown]"));
        assert_eq!(s.matches("R  g()").count(), MAX_R);
        assert!(s.contains("[5 more R calls not shown]"));
        assert!(s.contains("[the native stack ends here: no unwind information]"));
        assert!(s.contains("SIGABRT (abort), in R's main thread"));
        let s = render(|o| {
            write(
                o,
                Header { signal: libc::SIGFPE, address: Some(0x40), main_thread: false },
                NativeFrames { ips: &[0x1], counted_all: true, stopped: None },
                |_, o| o.text("f"),
                RCalls { owners: &[], counted_all: true },
                |_, _| {},
            )
        });
        assert!(s.contains("in a thread other than R's main thread"));
        assert!(!s.contains("R  "));
        // A walk that filled its buffer: the count is a lower bound.
        let s = render(|o| {
            write(
                o,
                Header { signal: libc::SIGSEGV, address: None, main_thread: true },
                NativeFrames { ips: &ips, counted_all: false, stopped: None },
                |_, o| o.text("f"),
                RCalls { owners: &owners, counted_all: false },
                |_, o| o.text("g()"),
            )
        });
        assert!(s.contains("[at least 20 more native frames not shown]"));
        assert!(s.contains("[at least 5 more R calls not shown]"));
    }
}
