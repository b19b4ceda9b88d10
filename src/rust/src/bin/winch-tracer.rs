//! winch's tracer process: stops the R session's own child processes for
//! the moment a sample reads them, on the session's behalf (see
//! winch-core's `outside::helper`). Started by winch, never by hand.

fn main() {
    std::process::exit(winch_core::outside::helper::main());
}
