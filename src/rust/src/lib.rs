//! The glue between R and winch's core (`winch-core`): the `.Call` entry
//! points, registered in `src/init.c`.
//!
//! Adding an entry point: a function in `entries.rs`, a line in the
//! `entry_points!` table below, and a line `X(name, n)` in src/init.c. The
//! tests compare the two tables (`rs_entry_points()` against R's
//! registration).

#![deny(unsafe_op_in_unsafe_fn)]

mod args;
mod columns;
mod crash;
mod entries;
mod entry;
mod frame_rows;
mod frames;
mod in_step;
mod lazy_columns;
mod native_calls;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod outside;
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[path = "outside_unsupported.rs"]
mod outside;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod profile;
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[path = "profile_unsupported.rs"]
mod profile;
mod profile_form;
mod rapi;
mod rstate;
mod spliced;
mod string_pool;
mod throws;
mod trace_rows;
mod value;

/// Defines, for each entry, the C entry point `winch_<name>` that runs
/// `entries::name` through `entry::run`, and `ENTRY_POINTS`, the table of
/// names and numbers of arguments. An entry is `name(args...)`, whose
/// function takes each argument, or `name(Args { args... })`, whose
/// function takes one struct `Args` (defined here) holding them all.
macro_rules! entry_points {
    ($($name:ident $args:tt;)*) => {
        $( entry_point!($name $args); )*

        /// Every entry point and its number of arguments.
        pub const ENTRY_POINTS: &[(&str, usize)] = &[$((stringify!($name), entry_point!(@arity $args))),*];
    };
}

/// One entry of `entry_points!`.
macro_rules! entry_point {
    ($name:ident ($($arg:ident),*)) => {
        #[export_name = concat!("winch_", stringify!($name))]
        pub extern "C" fn $name($($arg: rapi::Sexp),*) -> rapi::Sexp {
            entry::run(|| entries::$name($(args::Arg::new($arg, stringify!($arg))),*))
        }
    };
    ($name:ident ($Args:ident { $($arg:ident),* })) => {
        #[doc = concat!("The arguments of `", stringify!($name), "`.")]
        pub struct $Args {
            $(pub $arg: args::Arg,)*
        }

        #[export_name = concat!("winch_", stringify!($name))]
        pub extern "C" fn $name($($arg: rapi::Sexp),*) -> rapi::Sexp {
            entry::run(|| entries::$name($Args { $($arg: args::Arg::new($arg, stringify!($arg))),* }))
        }
    };
    (@arity ($($arg:ident),*)) => { <[&str]>::len(&[$(stringify!($arg)),*]) };
    (@arity ($Args:ident { $($arg:ident),* })) => { <[&str]>::len(&[$(stringify!($arg)),*]) };
}

entry_points! {
    rs_init(version);
    rs_entry_points();
    rs_error_of_kind(kind);
    rs_available();
    rs_backends();
    rs_trace_back(backend, libr, synced);
    rs_joint(backend, frames, calls, libr, use_contexts);
    rs_splice_native(SpliceNativeArgs { trace, attr_names, row_frames, frames, calls, first, backend, use_contexts, synced });
    rs_match_rows(trace_calls, calls);
    rs_splice_calls(n, r_frame);
    rs_context_chain(backend);
    rs_thread_capture(backend);
    rs_stage_times(backend, n);
    rs_cache_info();
    rs_lazy_columns(x);
    rs_lazy_columns_settle();
    rs_set_debug_dirs(dirs);
    rs_set_registered_dlls(infos);
    rs_loader_state(paths);
    rs_set_in_step(debug_dirs, debuginfod, generation);
    rs_in_step();
    rs_set_debuginfod(enabled);
    rs_debuginfod_info();
    rs_profile_start(ProfileStartArgs { interval, event, loops, region, lines, symbols, frames, calls, probes, expected, threads, options });
    rs_profile_learn_bc(opcodes);
    rs_rprof_running(method);
    rs_profile_stop();
    rs_profile_discard();
    rs_profile_active();
    rs_profile_write(parts, path, format, lines);
    rs_profile_check(parts);
    rs_profile_form();
    rs_profile_learn_loop(kind);
    rs_profile_loops_known();
    rs_resource_usage();
    rs_profile_sample_cost(n, thrash);
    rs_throws_set(enable);
    rs_throws_status();
    rs_throws_tick();
    rs_last_throw();
    rs_crash_set(enable);
    rs_crash_status();
    rs_crash_rearm();
    rs_crash_handlers();
    rs_dump(pid, libr);
    rs_dump_core(path, exe, libr);
    rs_record_start(pid, interval, threads, idle, loops, lines, children);
    rs_record_tick();
    rs_record_stop();
    rs_record_discard();
    rs_target_usage(pid);
    rs_descendants(pid);
    rs_file_kind(path);
}
