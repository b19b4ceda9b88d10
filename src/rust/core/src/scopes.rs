//! The enclosing namespaces and classes of a C++ function in DWARF, for
//! functions known only by their plain `DW_AT_name`: a function inlined
//! everywhere (`static inline`, `always_inline`) often has no linkage name,
//! and would print `evaluate` where its out-of-line copy prints
//! `wtest::evaluate`.

use gimli::{AttributeValue, DwLang, Reader, UnitOffset, UnitRef};

/// Whether `lang` is a C++ dialect.
pub fn is_cpp(lang: Option<DwLang>) -> bool {
    use gimli::constants as c;
    [
        c::DW_LANG_C_plus_plus,
        c::DW_LANG_C_plus_plus_03,
        c::DW_LANG_C_plus_plus_11,
        c::DW_LANG_C_plus_plus_14,
        c::DW_LANG_C_plus_plus_17,
        c::DW_LANG_C_plus_plus_20,
    ]
    .into_iter()
    .any(|l| Some(l) == lang)
}

/// Whether a name is already qualified or mangled (from a linkage name):
/// then DWARF's scopes add nothing.
pub fn needs_scope(name: &str) -> bool {
    !name.contains("::") && !name.contains('(') && !name.starts_with("_Z")
}

/// `name` prefixed with the scopes (`ns::Class::`) that enclose the
/// declaration of the function of DIE `die` (an inlined call or a
/// subprogram; its abstract origin and specification are followed within
/// the unit). None when there are none or the DWARF cannot be followed.
pub fn qualified<R: Reader>(unit: UnitRef<'_, R>, die: UnitOffset<R::Offset>, name: &str) -> Option<String> {
    let decl = declaration(unit, die)?;
    let scopes = scopes_of(unit, decl)?;
    (!scopes.is_empty()).then(|| format!("{}::{name}", scopes.join("::")))
}

/// The DIE that declares the function: abstract origins and specifications
/// followed to the end (references into other units are not followed).
fn declaration<R: Reader>(
    unit: UnitRef<'_, R>,
    mut die: UnitOffset<R::Offset>,
) -> Option<UnitOffset<R::Offset>> {
    for _ in 0..8 {
        let entry = unit.entry(die).ok()?;
        let next = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
            .into_iter()
            .find_map(|at| entry.attr_value(at));
        match next {
            Some(AttributeValue::UnitRef(o)) => die = o,
            Some(_) => return None,
            None => return Some(die),
        }
    }
    None
}

/// The names of the namespaces, classes, structs and unions enclosing DIE
/// `target`, outermost first, found by one walk of the unit's tree.
fn scopes_of<R: Reader>(unit: UnitRef<'_, R>, target: UnitOffset<R::Offset>) -> Option<Vec<String>> {
    // (depth, name) of the scopes open at the walk's position.
    let mut open: Vec<(isize, Option<String>)> = Vec::new();
    let mut cursor = unit.entries();
    while let Some(entry) = cursor.next_dfs().ok()? {
        let depth = entry.depth();
        while open.last().is_some_and(|(d, _)| *d >= depth) {
            open.pop();
        }
        if entry.offset() == target {
            return Some(open.into_iter().filter_map(|(_, n)| n).collect());
        }
        if entry.offset().0 > target.0 {
            return None;
        }
        let scope = match entry.tag() {
            gimli::DW_TAG_namespace => Some(
                scope_name(unit, entry.attr_value(gimli::DW_AT_name))
                    .unwrap_or_else(|| "(anonymous namespace)".to_string()),
            ),
            // An anonymous class cannot hold a function that needs a name.
            gimli::DW_TAG_class_type | gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => {
                scope_name(unit, entry.attr_value(gimli::DW_AT_name))
            }
            // The tree walk only needs to descend where the target can be;
            // other entries with children still open a level.
            _ => None,
        };
        if entry.has_children() {
            open.push((depth, scope));
        }
    }
    None
}

fn scope_name<R: Reader>(unit: UnitRef<'_, R>, value: Option<AttributeValue<R>>) -> Option<String> {
    let s = unit.attr_string(value?).ok()?;
    Some(s.to_string_lossy().ok()?.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles `source` (C++) into a shared library in a fresh directory,
    /// or None (with a note) without a C++ compiler.
    fn compile_cpp(source: &str) -> Option<std::path::PathBuf> {
        let dir = std::env::temp_dir().join(format!("winch-scopes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let src = dir.join("t.cpp");
        std::fs::write(&src, source).ok()?;
        let so = dir.join("t.so");
        let out = std::process::Command::new("c++")
            .args(["-g", "-O2", "-fPIC", "-shared", "-o"])
            .arg(&so)
            .arg(&src)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(so),
            _ => {
                eprintln!("skipped: no working C++ compiler");
                None
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn inlined_cpp_functions_get_their_namespaces() {
        use crate::modules::Module;
        use object::{Object, ObjectSymbol};
        let Some(so) = compile_cpp(
            "typedef struct { int a; } anon_t;\n\
             namespace outer { struct Named { int b; }; namespace inner {\n\
             static inline __attribute__((always_inline)) int helper(int x) {\n\
               return x * x * 3 + __builtin_popcount(x);\n\
             }\n\
             } }\n\
             extern \"C\" int entry(int x) { return outer::inner::helper(x) + 2; }\n",
        ) else {
            return;
        };
        let bytes = std::fs::read(&so).unwrap();
        let obj = object::File::parse(&bytes[..]).unwrap();
        let entry = obj.symbols().find(|s| s.name() == Ok("entry")).unwrap();
        let module = Module { has_file: true, ..Module::synthetic(so.to_str().unwrap(), 0, 0x100000, false) };
        let mut info = crate::debuginfo::load(&module, &[]);
        let names: Vec<String> = (entry.address()..entry.address() + entry.size())
            .flat_map(|a| info.resolve(a))
            .filter(|r| r.inlined)
            .filter_map(|r| r.func.map(|f| f.to_string()))
            .collect();
        assert!(!names.is_empty(), "no inlined call found");
        assert!(names.iter().all(|n| n == "outer::inner::helper"), "{names:?}");
        let _ = std::fs::remove_dir_all(so.parent().unwrap());
    }

    #[test]
    fn only_plain_names_get_scopes() {
        assert!(needs_scope("evaluate"));
        assert!(!needs_scope("wtest::evaluate"));
        assert!(!needs_scope("f(int)"));
        assert!(!needs_scope("_ZN5wtest8evaluateEv"));
        assert!(is_cpp(Some(gimli::DW_LANG_C_plus_plus_14)));
        assert!(!is_cpp(Some(gimli::DW_LANG_C99)));
        assert!(!is_cpp(None));
    }
}
