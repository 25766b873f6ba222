//! Compiles c/printf.c (dprintf and friends), c/execl.c (execl and friends) and c/wstdio.c
//! (the fwprintf and fwscanf families): variadic C functions, which stable Rust cannot
//! define, into a static library linked into the shim, and links the shim with its calls to
//! its own functions bound to them. The C compiler is `$CC` or `cc`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let sources = ["c/printf.c", "c/execl.c", "c/wstdio.c"];
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let lib = out.join("libengram_preload_c.a");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut objects = Vec::new();
    for src in sources {
        println!("cargo:rerun-if-changed={src}");
        let obj = out.join(
            PathBuf::from(src)
                .with_extension("o")
                .file_name()
                .expect("a file"),
        );
        let status = Command::new(&cc)
            .args(["-c", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-o"])
            .arg(&obj)
            .arg(src)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!(
                "compiling {src} with {cc} failed (a C compiler is needed: apt-get install gcc)"
            );
            std::process::exit(1);
        }
        objects.push(obj);
    }
    let _ = std::fs::remove_file(&lib);
    let ar = std::env::var("AR").unwrap_or_else(|_| "ar".into());
    let status = Command::new(&ar)
        .arg("crs")
        .arg(&lib)
        .args(&objects)
        .status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("archiving {} with {ar} failed", lib.display());
        std::process::exit(1);
    }
    static_unwinder(&cc, &out);
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=engram_preload_c");
    // The shim's calls to its own exported functions (its openat from scandir, its stat from
    // nftw) bind to its own definitions: through the PLT, a program that defines a function
    // of the same name (patch defines renameat2) got them instead.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
}

/// Links the unwinder statically (libgcc_eh.a) instead of libgcc_s.so.1. Loading libgcc_s
/// costs every process the shim is preloaded into about 0.1 ms on a virtual machine: its
/// constructor runs CPUID, which traps to the hypervisor, and its pages fault in. std asks
/// for `-lgcc_s` by name, so a linker script of that name in the shim's own search path,
/// which the linker reads before the system's, answers it with the static archive. Where the
/// compiler has no libgcc_eh.a, the shim links libgcc_s as before.
fn static_unwinder(cc: &str, out: &std::path::Path) {
    let script = out.join("libgcc_s.so");
    let _ = std::fs::remove_file(&script);
    let Ok(found) = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let archive = String::from_utf8_lossy(&found.stdout).trim().to_string();
    if !found.status.success() || !std::path::Path::new(&archive).is_absolute() {
        return;
    }
    // A compiler upgraded since (another path) makes the script stale: look again.
    println!("cargo:rerun-if-changed={archive}");
    if let Err(e) = std::fs::write(&script, format!("INPUT(\"{archive}\")\n")) {
        eprintln!("writing {}: {e}", script.display());
        std::process::exit(1);
    }
}
