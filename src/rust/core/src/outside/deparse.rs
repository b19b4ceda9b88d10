//! R calls of another process as R source text, read from its memory: what
//! R's parser reads back as the same call, as far as it goes. Symbols,
//! calls (operators written as operators), and scalar constants are
//! written out; what cannot be (longer vectors, functions, environments,
//! anything too deep or too long) becomes a backquoted placeholder such as
//! `` `<dbl[10]>` ``, which still parses, as a symbol.

use crate::memory::Memory;
use crate::r::heap::{self as rheap, Buf};
use crate::r::sexp::{
    self, BCODESXP, BUILTINSXP, CLOSXP, CPLXSXP, ENVSXP, INTSXP, LANGSXP, LGLSXP, LISTSXP, NILSXP, PROMSXP,
    REALSXP, SPECIALSXP, STRSXP, SYMSXP, VECSXP,
};

/// Most nesting written out, and most bytes of text.
const MAX_DEPTH: usize = 8;
const MAX_LEN: usize = 1000;

/// The call at `call` as R source; None if it is not a call.
pub fn call_text(h: &impl Memory, call: usize) -> Option<String> {
    if sexp::type_of(h, call)? != LANGSXP {
        return None;
    }
    let mut out = String::new();
    expr(h, call, 0, &mut out);
    if out.len() > MAX_LEN {
        let mut cut = MAX_LEN;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        // Cut text does not parse: the caller falls back to the label.
        out.push_str(" ...");
    }
    Some(out)
}

fn placeholder(out: &mut String, what: &str) {
    out.push('`');
    out.push('<');
    out.push_str(what);
    out.push('>');
    out.push('`');
}

fn expr(h: &impl Memory, x: usize, depth: usize, out: &mut String) {
    if depth > MAX_DEPTH || out.len() > MAX_LEN {
        placeholder(out, "...");
        return;
    }
    let Some(t) = sexp::type_of(h, x) else {
        placeholder(out, "unreadable");
        return;
    };
    match t {
        NILSXP => out.push_str("NULL"),
        SYMSXP => symbol(h, x, out),
        LANGSXP => call(h, x, depth, out),
        PROMSXP => expr(h, sexp::promise_code(h, x).unwrap_or(0), depth + 1, out),
        LGLSXP | INTSXP | REALSXP | STRSXP => constant(h, x, t, out),
        CLOSXP => placeholder(out, "fn"),
        SPECIALSXP | BUILTINSXP => placeholder(out, "primitive"),
        ENVSXP => placeholder(out, "env"),
        BCODESXP => placeholder(out, "bytecode"),
        VECSXP => placeholder(out, &format!("list[{}]", sexp::length(h, x).unwrap_or(0))),
        CPLXSXP => placeholder(out, "cplx"),
        _ => placeholder(out, "object"),
    }
}

fn name_of(h: &impl Memory, sym: usize) -> Option<String> {
    let mut b = Buf::default();
    rheap::push_chars(h, sexp::printname(h, sym)?, &mut b)?;
    Some(String::from_utf8_lossy(b.as_bytes()).into_owned())
}

const RESERVED: [&str; 19] = [
    "if",
    "else",
    "repeat",
    "while",
    "function",
    "for",
    "next",
    "break",
    "TRUE",
    "FALSE",
    "NULL",
    "Inf",
    "NaN",
    "NA",
    "NA_integer_",
    "NA_real_",
    "NA_character_",
    "in",
    "NA_complex_",
];

fn syntactic(name: &str) -> bool {
    let mut c = name.chars();
    let ok_start = match c.next() {
        Some(ch) if ch.is_alphabetic() => true,
        Some('.') => !name[1..].starts_with(|d: char| d.is_ascii_digit()),
        _ => false,
    };
    ok_start
        && name.chars().all(|ch| ch.is_alphanumeric() || ch == '.' || ch == '_')
        && !RESERVED.contains(&name)
}

fn symbol(h: &impl Memory, sym: usize, out: &mut String) {
    match name_of(h, sym) {
        Some(n) if n.is_empty() => {} // the missing argument
        Some(n) if syntactic(&n) || n == "..." => out.push_str(&n),
        Some(n) => {
            out.push('`');
            out.push_str(&n.replace('`', "\\`"));
            out.push('`');
        }
        None => placeholder(out, "unreadable"),
    }
}

/// The arguments of a call: `(value, tag)` pairs.
fn args(h: &impl Memory, mut list: usize) -> Vec<(usize, Option<String>)> {
    let mut v = Vec::new();
    while sexp::type_of(h, list) == Some(LISTSXP) && v.len() < 64 {
        let tag = sexp::tag(h, list).unwrap_or(0);
        let tag = (sexp::type_of(h, tag) == Some(SYMSXP)).then(|| name_of(h, tag)).flatten();
        v.push((sexp::car(h, list).unwrap_or(0), tag));
        list = sexp::cdr(h, list).unwrap_or(0);
    }
    v
}

const BINARY: [&str; 22] = [
    "+", "-", "*", "/", "^", "==", "!=", "<", ">", "<=", ">=", "&", "|", "&&", "||", "<-", "<<-", "=", "~",
    ":", "|>", "->",
];

fn call(h: &impl Memory, x: usize, depth: usize, out: &mut String) {
    let head = sexp::car(h, x).unwrap_or(0);
    let a = args(h, sexp::cdr(h, x).unwrap_or(0));
    let op = (sexp::type_of(h, head) == Some(SYMSXP)).then(|| name_of(h, head)).flatten();
    let untagged = a.iter().all(|(_, t)| t.is_none());
    let sub = |v: usize, out: &mut String| expr(h, v, depth + 1, out);
    match op.as_deref() {
        Some(o @ ("::" | ":::" | "$" | "@")) if a.len() == 2 && untagged => {
            sub(a[0].0, out);
            out.push_str(o);
            sub(a[1].0, out);
        }
        Some(o)
            if (BINARY.contains(&o) || (o.starts_with('%') && o.ends_with('%') && o.len() > 1))
                && a.len() == 2
                && untagged =>
        {
            // Operands in parentheses where they are calls themselves:
            // the text parses to the same call whatever the precedence.
            let wrapped = |v: usize, out: &mut String| {
                let is_call = sexp::type_of(h, v) == Some(LANGSXP);
                if is_call {
                    out.push('(');
                }
                sub(v, out);
                if is_call {
                    out.push(')');
                }
            };
            wrapped(a[0].0, out);
            out.push(' ');
            out.push_str(o);
            out.push(' ');
            wrapped(a[1].0, out);
        }
        Some("{") => out.push_str(if a.is_empty() { "{}" } else { "{ `<...>` }" }),
        Some("function") => out.push_str("function(...) `<body>`"),
        Some(o @ ("[" | "[[")) if !a.is_empty() && a[0].1.is_none() => {
            sub(a[0].0, out);
            out.push_str(o);
            arg_list(h, &a[1..], depth, out);
            out.push_str(if o == "[" { "]" } else { "]]" });
        }
        Some(_) => {
            symbol(h, head, out);
            out.push('(');
            arg_list(h, &a, depth, out);
            out.push(')');
        }
        None => {
            // `pkg::f(x)`, `obj$f(x)` as written; other heads (a function
            // made on the spot, a call's result) in parentheses.
            let plain = sexp::type_of(h, head) == Some(LANGSXP)
                && sexp::car(h, head).is_some_and(|op| {
                    sexp::type_of(h, op) == Some(SYMSXP)
                        && matches!(name_of(h, op).as_deref(), Some("::" | ":::" | "$" | "@"))
                });
            if !plain {
                out.push('(');
            }
            sub(head, out);
            out.push_str(if plain { "(" } else { ")(" });
            arg_list(h, &a, depth, out);
            out.push(')');
        }
    }
}

fn arg_list(h: &impl Memory, a: &[(usize, Option<String>)], depth: usize, out: &mut String) {
    for (i, (v, tag)) in a.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        if let Some(t) = tag {
            if syntactic(t) || t == "..." {
                out.push_str(t);
            } else {
                out.push('`');
                out.push_str(t);
                out.push('`');
            }
            out.push_str(" = ");
        }
        expr(h, *v, depth + 1, out);
    }
}

fn constant(h: &impl Memory, x: usize, t: u8, out: &mut String) {
    let n = sexp::length(h, x);
    let kind = match t {
        LGLSXP => "lgl",
        INTSXP => "int",
        REALSXP => "dbl",
        _ => "chr",
    };
    let Some(data) = (n == Some(1)).then(|| sexp::data(h, x)).flatten() else {
        placeholder(out, &format!("{kind}[{}]", n.map_or("?".to_string(), |n| n.to_string())));
        return;
    };
    match t {
        LGLSXP => match h.int(data) {
            Some(0) => out.push_str("FALSE"),
            Some(sexp::NA_LOGICAL) => out.push_str("NA"),
            Some(_) => out.push_str("TRUE"),
            None => placeholder(out, "unreadable"),
        },
        INTSXP => match h.int(data) {
            Some(sexp::NA_INTEGER) => out.push_str("NA_integer_"),
            Some(v) => out.push_str(&format!("{v}L")),
            None => placeholder(out, "unreadable"),
        },
        REALSXP => match h.word(data).map(|w| f64::from_bits(w as u64)) {
            Some(v) if sexp::is_na_real(v) => out.push_str("NA_real_"),
            Some(v) if v.is_nan() => out.push_str("NaN"),
            Some(v) if v.is_infinite() => out.push_str(if v > 0.0 { "Inf" } else { "-Inf" }),
            Some(v) if v != 0.0 && (v.abs() >= 1e15 || v.abs() < 1e-4) => out.push_str(&format!("{v:e}")),
            Some(v) => out.push_str(&format!("{v}")),
            None => placeholder(out, "unreadable"),
        },
        _ => {
            let mut b = Buf::default();
            let c = h.word(data).unwrap_or(0);
            if c == 0 || rheap::push_chars(h, c, &mut b).is_none() {
                placeholder(out, "unreadable");
                return;
            }
            out.push('"');
            for ch in String::from_utf8_lossy(b.as_bytes()).chars() {
                match ch {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::r::sexp::tests::{FakeHeap, NIL};

    #[test]
    fn calls_are_written_as_r_reads_them() {
        let mut heap = FakeHeap::default();
        let f = heap.symbol("f");
        let x = heap.symbol("x");
        let one = heap.ints(&[1]);
        let inner = heap.call(f, &[x, one]);
        let plus = heap.symbol("+");
        let sum = heap.call(plus, &[inner, x]);
        let g = heap.symbol("my fun");
        let outer = heap.call(g, &[sum]);
        let m = &heap;
        assert_eq!(call_text(&m, inner).unwrap(), "f(x, 1L)");
        assert_eq!(call_text(&m, outer).unwrap(), "`my fun`((f(x, 1L)) + x)");
        let many = heap.ints(&[1, 2, 3]);
        let c = heap.call(f, &[many]);
        let m = &heap;
        assert_eq!(call_text(&m, c).unwrap(), "f(`<int[3]>`)");
        let (colons, stats, fft) = (heap.symbol("::"), heap.symbol("stats"), heap.symbol("fft"));
        let head = heap.call(colons, &[stats, fft]);
        let qualified = heap.call(head, &[x]);
        let anon = heap.call(inner, &[x]);
        let m = &heap;
        assert_eq!(call_text(&m, qualified).unwrap(), "stats::fft(x)");
        assert_eq!(call_text(&m, anon).unwrap(), "(f(x, 1L))(x)");
        assert_eq!(call_text(&m, x), None, "a symbol is not a call");
    }

    #[test]
    fn a_promise_is_written_as_its_expression() {
        let mut heap = FakeHeap::default();
        let (f, g, x) = (heap.symbol("f"), heap.symbol("g"), heap.symbol("x"));
        let code = heap.call(g, &[x]);
        let env = heap.env(NIL, NIL);
        let promise = heap.promise(code, env);
        let c = heap.call(f, &[promise]);
        assert_eq!(call_text(&&heap, c).unwrap(), "f(g(x))", "not its environment");
    }

    #[test]
    fn names_that_need_backquotes_get_them() {
        assert!(syntactic("a.b_c1"));
        assert!(syntactic(".x"));
        assert!(!syntactic(".1x"));
        assert!(!syntactic("if"));
        assert!(!syntactic("a b"));
        assert!(!syntactic("[.data.frame"));
    }
}
