// Compiles the two small C shims of the core crate:
// - csrc/rcontext_layout.c reports the offsets of R's RCNTXT prefix as the
//   platform's C compiler lays them out (they depend on sizeof(sigjmp_buf));
// - csrc/libunwind_shim.c wraps libunwind's cursor API, whose entry points are
//   per-architecture macros that Rust cannot name portably.
// libunwind is found with pkg-config; when it is missing the crate still builds
// and only the `backtrace` backend is available.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(winch_libunwind)");
    println!("cargo::rerun-if-changed=csrc/rcontext_layout.c");
    println!("cargo::rerun-if-changed=csrc/libunwind_shim.c");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");

    // Only Linux is supported: elsewhere the crate builds without the shims
    // (and reports that it cannot capture).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    cc::Build::new().file("csrc/rcontext_layout.c").warnings(true).compile("winch_rcontext_layout");

    if std::env::var_os("CARGO_FEATURE_LIBUNWIND").is_none() {
        return;
    }
    match pkg_config::Config::new().probe("libunwind") {
        Ok(lib) => {
            let mut build = cc::Build::new();
            build.file("csrc/libunwind_shim.c").warnings(true);
            for dir in &lib.include_paths {
                build.include(dir);
            }
            build.compile("winch_libunwind_shim");
            println!("cargo::rustc-cfg=winch_libunwind");
        }
        Err(err) => {
            println!(
                "cargo::warning=libunwind not found by pkg-config ({err}); \
                 building with the backtrace backend only"
            );
        }
    }
}
