//! Shared libraries stored in the pool, loaded with `dlopen` (the shim hands the loader a
//! copy), and `dlopen` of real libraries unchanged by the shim's interposition.

mod common;

use common::{Pool, require};

/// A library built into the pool loads, twice gives one handle, a rebuilt one loads anew,
/// a missing one fails with the loader's message; a real library that opens a plugin by
/// its bare name through its own RUNPATH ($ORIGIN) still finds it (the loader must see the
/// library as the caller, not the shim).
#[test]
fn libraries_in_the_pool_load_with_dlopen() {
    if !require("gcc", "gcc") {
        return;
    }
    let p = Pool::new("dlopen", 64);
    let real = p.scratch.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let out = p.sh(&format!(
        r#"
        cd /mnt/engram
        echo 'int answer(void) {{ return 42; }}' > a.c
        gcc -shared -fPIC a.c -o liba.so
        cat > main.c <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {{
    void *a = dlopen(argv[1], RTLD_NOW), *b = dlopen(argv[1], RTLD_NOW);
    if (!a) {{ printf("error %s\n", dlerror()); return 1; }}
    int (*f)(void) = (int (*)(void))dlsym(a, "answer");
    printf("%d %s\n", f(), a == b ? "same" : "different");
    void *m = dlopen("/mnt/engram/missing.so", RTLD_NOW);
    printf("missing %s\n", !m && strstr(dlerror(), "No such file") ? "refused" : "loaded");
    if (argc > 2) {{
        void *outer = dlopen(argv[2], RTLD_NOW);
        int (*g)(void) = outer ? (int (*)(void))dlsym(outer, "outer") : 0;
        printf("outer %d\n", g ? g() : -1);
    }}
    return 0;
}}
EOF
        gcc main.c -o /{real}/main -ldl
        cd {real}
        echo 'int plugin(void) {{ return 7; }}' > plugin.c
        gcc -shared -fPIC plugin.c -o libplugin.so
        cat > outer.c <<'EOF'
#include <dlfcn.h>
int outer(void) {{
    void *h = dlopen("libplugin.so", RTLD_NOW);
    int (*f)(void) = h ? (int (*)(void))dlsym(h, "plugin") : 0;
    return f ? f() : -1;
}}
EOF
        gcc -shared -fPIC outer.c -o libouter.so -Wl,-rpath,'$ORIGIN' -Wl,--enable-new-dtags -ldl
        ./main /mnt/engram/liba.so {real}/libouter.so
        cd /mnt/engram
        sleep 0.01
        echo 'int answer(void) {{ return 43; }}' > a.c
        gcc -shared -fPIC a.c -o liba.so
        {real}/main /mnt/engram/liba.so
    "#,
        real = real.display()
    ));
    assert_eq!(
        out,
        "42 same\nmissing refused\nouter 7\n43 same\nmissing refused\n"
    );
    p.fsck();
}
