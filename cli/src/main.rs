//! `sluice`: the user-facing command line tool.

fn main() {
    println!("sluice {}", env!("CARGO_PKG_VERSION"));
}
