//! The Rust API example of README.md, kept compiling and passing (keep the two in step).

use engram_core::{Fs, OpenOptions, Options};

#[test]
fn readme_api_example() -> engram_core::Result<()> {
    let path = format!("/dev/shm/engram-readme-{}.pool", std::process::id());

    Fs::mkfs(&path, 64 << 20)?;
    let fs = Fs::open(&path, &Options::default())?;
    fs.mkdir("/logs", 0o755)?;
    fs.write_file("/logs/today", b"hello")?; // atomic and durable on return
    let f = fs.open_file("/logs/today", &OpenOptions::new().write(true).append(true))?;
    f.write_next(b", world")?;
    assert_eq!(fs.read_file("/logs/today")?, b"hello, world");
    fs.unmount()?;

    std::fs::remove_file(&path).unwrap();
    Ok(())
}
