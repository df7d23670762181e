//! Reads an oracle `template` request (or a JSON array of them) on stdin and prints the answer:
//! what `sluice render` does, for trying templates and diffing against the Go oracle.

use std::io::Read;

fn main() -> std::io::Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    println!("{}", sluice_template::oracle::run(&input));
    Ok(())
}
