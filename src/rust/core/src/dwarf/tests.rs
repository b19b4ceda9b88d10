//! The lazy reader against addr2line's eager one on the same files, and
//! what it reads of a library of many units.

use super::*;
use object::{Object, ObjectSection, ObjectSymbol};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("winch-dwarf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds a shared library from `sources` (name, text) with `flags`; None
/// (with a note) without a compiler.
fn build(dir: &Path, sources: &[(String, String)], flags: &[&str]) -> Option<PathBuf> {
    let mut files = Vec::new();
    for (name, text) in sources {
        let p = dir.join(name);
        std::fs::write(&p, text).ok()?;
        files.push(p);
    }
    let so = dir.join("lib.so");
    let out = Command::new("g++").args(["-shared", "-fPIC", "-o"]).arg(&so).args(flags).args(&files).output();
    match out {
        Ok(o) if o.status.success() => Some(so),
        Ok(o) => panic!("g++ failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            eprintln!("skipped: no g++");
            None
        }
    }
}

fn lazy_of(bytes: &[u8]) -> LazyDwarf {
    lazy_with(bytes, None)
}

/// `bytes`' DWARF as winch loads it (compressed sections lazily), with the
/// supplementary file `sup`.
fn lazy_with(bytes: &[u8], sup: Option<&[u8]>) -> LazyDwarf {
    let obj = object::File::parse(bytes).unwrap();
    let sup = sup.map(|b| object::File::parse(b).unwrap());
    crate::debuginfo::load_dwarf(&obj, sup.as_ref()).expect("plausible DWARF")
}

type Row = (Option<String>, Option<String>, Option<u32>, Option<u32>);

/// The DWARF sections of `obj` that lookups read, inflated.
fn sections_of(obj: &object::File<'_>) -> Vec<(gimli::SectionId, Vec<u8>)> {
    READ.iter()
        .map(|&id| {
            let data = obj.section_by_name(id.name()).and_then(|s| s.uncompressed_data().ok());
            (id, data.map(|c| c.into_owned()).unwrap_or_default())
        })
        .collect()
}

/// addr2line's reader of `owned` (the reference).
fn reference_context(
    owned: &[(gimli::SectionId, Vec<u8>)],
    endian: gimli::RunTimeEndian,
) -> addr2line::Context<gimli::EndianSlice<'_, gimli::RunTimeEndian>> {
    let dwarf = gimli::Dwarf::load(|id| {
        let data = owned.iter().find(|(s, _)| *s == id).map_or(&[][..], |(_, d)| &d[..]);
        Ok::<_, gimli::Error>(gimli::EndianSlice::new(data, endian))
    })
    .unwrap();
    addr2line::Context::from_dwarf(dwarf).unwrap()
}

fn reference(
    bytes: &[u8],
    probe: u64,
    ctx: &addr2line::Context<gimli::EndianSlice<'_, gimli::RunTimeEndian>>,
) -> Vec<Row> {
    let _ = bytes;
    let mut out = Vec::new();
    if let Ok(mut frames) = ctx.find_frames(probe).skip_all_loads() {
        while let Ok(Some(f)) = frames.next() {
            let name = f.function.as_ref().and_then(|n| n.raw_name().ok().map(|s| s.into_owned()));
            let (file, line, column) = match f.location {
                Some(l) => (l.file.map(str::to_string), l.line, l.column),
                None => (None, None, None),
            };
            out.push((name, file, line, column));
        }
    }
    out
}

fn ours(d: &mut LazyDwarf, probe: u64) -> Vec<Row> {
    d.frames(probe)
        .into_iter()
        .map(|f| {
            let (file, line, column) = match f.location {
                Some(l) => (l.file.map(|s| s.to_string()), l.line, l.column),
                None => (None, None, None),
            };
            (f.name, file, line, column)
        })
        .collect()
}

const CPP_A: &str = r#"
namespace outer { namespace inner {
template <typename T> static inline __attribute__((always_inline)) T sq(T x) { return x * x + 1; }
static inline __attribute__((always_inline)) int twice(int x) { return sq(x) + sq(x + 1); }
} }
struct Widget { int v; __attribute__((noinline)) int get(int k) const; };
int Widget::get(int k) const { return outer::inner::twice(v + k) * 3; }
extern "C" __attribute__((noinline)) int a_entry(int x) {
  Widget w{x};
  int s = 0;
  for (int i = 0; i < x; i++) s += w.get(i) + outer::inner::sq<long>(i);
  return s;
}
"#;

const CPP_B: &str = r#"
#include <vector>
extern "C" int a_entry(int);
static int helper(std::vector<int>& v) { int s = 0; for (int x : v) s += x; return s; }
extern "C" __attribute__((noinline)) int b_entry(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; i++) v.push_back(a_entry(i));
  return helper(v);
}
"#;

/// Every address of `so`'s functions, looked up by both readers.
fn agree_everywhere(so: &Path) {
    agree(so, so, None);
}

/// Every address of `reference`'s functions: addr2line reading `reference`
/// and the lazy reader reading `lazy` (the same library after dwz, with
/// its supplementary file `sup`) give the same frames.
fn agree(reference_so: &Path, lazy: &Path, sup: Option<&Path>) {
    let bytes = std::fs::read(reference_so).unwrap();
    let obj = object::File::parse(&bytes[..]).unwrap();
    let endian =
        if obj.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let owned = sections_of(&obj);
    let ctx = reference_context(&owned, endian);
    let (lazy_bytes, sup_bytes) = (std::fs::read(lazy).unwrap(), sup.map(|p| std::fs::read(p).unwrap()));
    let mut lazy = lazy_with(&lazy_bytes, sup_bytes.as_deref());
    let mut checked = 0;
    for sym in obj.symbols().filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0) {
        for probe in sym.address()..sym.address() + sym.size() {
            let want = reference(&bytes, probe, &ctx);
            let got = ours(&mut lazy, probe);
            assert_eq!(got, want, "at {probe:#x} in {}", sym.name().unwrap_or("?"));
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} addresses");
}

#[test]
fn the_lazy_reader_agrees_with_addr2line_at_every_address() {
    let sources = [("a.cpp".to_string(), CPP_A.to_string()), ("b.cpp".to_string(), CPP_B.to_string())];
    for (variant, flags) in [
        ("plain", &["-g", "-O2"][..]),
        ("compressed", &["-g", "-O2", "-gz=zlib"][..]),
        ("dwarf4", &["-gdwarf-4", "-O2"][..]),
        ("O0", &["-g", "-O0"][..]),
    ] {
        let dir = scratch(variant);
        let Some(so) = build(&dir, &sources, flags) else { return };
        agree_everywhere(&so);
        // Without .debug_aranges (as clang and rustc write), units are
        // found by their own ranges.
        let bare = dir.join("bare.so");
        let ok = Command::new("objcopy").arg("--remove-section=.debug_aranges").arg(&so).arg(&bare).status();
        if ok.is_ok_and(|s| s.success()) {
            agree_everywhere(&bare);
            let mut lazy = lazy_of(&std::fs::read(&bare).unwrap());
            assert_eq!(lazy.counts().units_listed, 0);
            let _ = lazy.frames(0x10);
            assert!(lazy.counts().scanned);
        } else {
            eprintln!("no objcopy: the test without .debug_aranges did not run");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_lookup_parses_only_its_unit_and_inflates_only_what_precedes_it() {
    // 40 units, compressed: a function of the first is looked up.
    let sources: Vec<(String, String)> = (0..40)
        .map(|i| {
            let body: String =
                (0..40).map(|j| format!("int f{i}_{j}(int x) {{ return x * {j} + {i}; }}\n")).collect();
            (format!("u{i}.c"), format!("extern \"C\" {{\n{body}}}\n"))
        })
        .collect();
    let dir = scratch("units");
    let Some(so) = build(&dir, &sources, &["-g", "-O1", "-gz=zlib"]) else { return };
    let bytes = std::fs::read(&so).unwrap();
    let obj = object::File::parse(&bytes[..]).unwrap();
    let addr = |name: &str| obj.symbols().find(|s| s.name() == Ok(name)).unwrap().address();
    let info_size =
        obj.section_by_name(".debug_info").unwrap().compressed_data().unwrap().uncompressed_size as usize;
    let mut lazy = lazy_of(&bytes);
    assert_eq!(lazy.counts().units_listed, 40);
    let frames = lazy.frames(addr("f0_3") + 1);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].name.as_deref(), Some("f0_3"));
    assert!(frames[0].location.as_ref().unwrap().file.as_deref().unwrap().ends_with("u0.c"));
    let c = lazy.counts();
    assert_eq!((c.units_parsed, c.scanned), (1, false), "{c:?}");
    let inflated = lazy.sections.iter().find(|(id, _)| *id == SectionId::DebugInfo).unwrap().1.data().len();
    assert!(inflated < info_size, "all of .debug_info ({info_size} bytes) was inflated");
    // The same unit again: nothing more is parsed; another unit: one more.
    lazy.frames(addr("f0_7") + 1);
    assert_eq!(lazy.counts().units_parsed, 1);
    let frames = lazy.frames(addr("f39_5") + 1);
    assert_eq!(frames[0].name.as_deref(), Some("f39_5"));
    assert!(lazy.counts().units_parsed <= 3, "{:?}", lazy.counts());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_lazy_reader_agrees_with_addr2line_on_the_c_librarys_debug_file() {
    // Debian's libc6-dbg: compressed, thousands of units.
    let map = crate::modules::current();
    let malloc = libc::malloc as unsafe extern "C" fn(usize) -> *mut libc::c_void as usize;
    let Some(index) = map.module_of(malloc) else { return };
    let Some(id) = map.module(index).build_id.clone() else { return };
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let path = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("skipped: no debug file of the C library at {path} (Debian: libc6-dbg)");
        return;
    };
    let obj = object::File::parse(&bytes[..]).unwrap();
    let endian = gimli::RunTimeEndian::Little;
    let owned = sections_of(&obj);
    let ctx = reference_context(&owned, endian);
    let mut lazy = lazy_of(&bytes);
    let names = [
        "malloc",
        "free",
        "__libc_start_call_main",
        "__libc_start_main_impl",
        "start_thread",
        "qsort_r",
        "abort",
    ];
    let mut checked = 0;
    for sym in obj.symbols().filter(|s| names.contains(&s.name().unwrap_or("")) && s.size() > 0) {
        for probe in sym.address()..sym.address() + sym.size() {
            assert_eq!(
                ours(&mut lazy, probe),
                reference(&bytes, probe, &ctx),
                "at {probe:#x} in {:?}",
                sym.name()
            );
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
    let c = lazy.counts();
    assert!(c.units_parsed < 20 && !c.scanned, "{c:?}");
}

#[test]
fn after_dwz_the_lazy_reader_gives_the_frames_of_the_library_before_it() {
    // dwz moves shared DIEs into partial units and, with -m, into a
    // supplementary file referred to by DW_FORM_GNU_ref_alt/strp_alt (as
    // Debian's debug packages are made). Without .debug_aranges too: the
    // partial units, which share the units' line programs, must not hide
    // the units holding the code.
    let has_dwz = Command::new("dwz").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_dwz {
        eprintln!("skipped: no dwz (Debian: dwz)");
        return;
    }
    let sources = [("a.cpp".to_string(), CPP_A.to_string()), ("b.cpp".to_string(), CPP_B.to_string())];
    for flags in [&["-g", "-O2"][..], &["-gdwarf-4", "-O2"][..]] {
        let dir = scratch("dwz");
        let Some(one) = build(&dir, &sources, flags) else { return };
        let two = dir.join("two.so");
        // A second library sharing the first's types, for a multifile.
        std::fs::copy(&one, &two).unwrap();
        let (before_one, before_two) = (dir.join("before1.so"), dir.join("before2.so"));
        std::fs::copy(&one, &before_one).unwrap();
        std::fs::copy(&two, &before_two).unwrap();
        let common = dir.join("common.debug");
        let status = Command::new("dwz")
            .arg("-m")
            .arg(&common)
            .arg("-M")
            .arg(&common)
            .arg(&one)
            .arg(&two)
            .status()
            .unwrap();
        assert!(status.success(), "dwz failed");
        assert!(common.exists(), "dwz made no supplementary file");
        let sup = Some(common.as_path());
        agree(&before_one, &one, sup);
        agree(&before_two, &two, sup);
        // Single-file dwz (partial units only), without .debug_aranges.
        let single = dir.join("single.so");
        std::fs::copy(&before_one, &single).unwrap();
        assert!(Command::new("dwz").arg(&single).status().unwrap().success());
        let bare = dir.join("single-bare.so");
        assert!(Command::new("objcopy")
            .arg("--remove-section=.debug_aranges")
            .arg(&single)
            .arg(&bare)
            .status()
            .unwrap()
            .success());
        agree(&before_one, &bare, None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn damaged_dwarf_never_panics_or_hangs_the_reader() {
    // Bytes of the fixture's sections overwritten at random (compressed or
    // not): lookups give what they can, inside the symbolizer's guard
    // against panics, but this reader is held to never panicking at all.
    let dir = scratch("fuzz");
    let sources = [("a.cpp".to_string(), CPP_A.to_string()), ("b.cpp".to_string(), CPP_B.to_string())];
    let Some(so) = build(&dir, &sources, &["-g", "-O2"]) else { return };
    let bytes = std::fs::read(&so).unwrap();
    let obj = object::File::parse(&bytes[..]).unwrap();
    let base = sections_of(&obj);
    let addrs: Vec<u64> = obj
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .flat_map(|s| s.address()..s.address() + s.size())
        .collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..300 {
        let mut sections = base.clone();
        for _ in 0..1 + next() % 3 {
            let k = (next() % sections.len() as u64) as usize;
            let data = &mut sections[k].1;
            if data.is_empty() {
                continue;
            }
            for _ in 0..1 + next() % 8 {
                let at = (next() % data.len() as u64) as usize;
                data[at] = [0u8, 0xff, 0x80, next() as u8][(next() % 4) as usize];
            }
        }
        let compress = round % 2 == 0;
        let sections: Vec<(SectionId, Section)> = sections
            .into_iter()
            .map(|(id, d)| {
                if compress && LAZY.contains(&id) && !d.is_empty() {
                    let n = d.len();
                    (id, Section::zlib(sections::tests_support::deflate(&d), n))
                } else {
                    (id, Section::whole(d))
                }
            })
            .collect();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut lazy = LazyDwarf::new(sections, None, gimli::RunTimeEndian::Little);
            let _ = lazy.plausible();
            for _ in 0..50 {
                let _ = lazy.frames(addrs[(next() % addrs.len() as u64) as usize]);
            }
        }));
        assert!(result.is_ok(), "round {round} panicked");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
