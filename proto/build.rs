//! Compiles the wire contract in `proto/` with protox (pure Rust, no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["sluice/v1/pipeline.proto"];
    println!("cargo:rerun-if-changed=sluice");
    let fds = protox::compile(files, ["."])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
