//! Compiles the wire contract in `proto/` with protox (pure Rust, no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "sluice/v1/common.proto",
        "sluice/v1/config.proto",
        "sluice/v1/resource.proto",
        "sluice/v1/match.proto",
        "sluice/v1/desired.proto",
        "sluice/v1/lease.proto",
    ];
    println!("cargo:rerun-if-changed=sluice");
    let fds = protox::compile(files, ["."])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
