//! Page reservations of many clients on a small pool.

use super::Daemon;
use engram_core::Fs;

/// Each client holds a reservation of pages it has not written yet. In a 16 MiB pool, 24
/// clients that each write a small file all succeed, and one more can still write a
/// quarter of the pool: before, each took a batch of 4 MiB, the fifth got ENOSPC with the
/// pool nearly empty.
#[test]
fn many_clients_of_a_small_pool_all_get_pages() {
    let d = Daemon::start("reserve", 16 << 20);
    let clients: Vec<Fs> = (0..24).map(|_| Fs::connect(&d.socket).unwrap()).collect();
    for (i, fs) in clients.iter().enumerate() {
        fs.write_file(format!("/f{i}"), b"hello").unwrap();
    }
    let last = Fs::connect(&d.socket).unwrap();
    let big = vec![7u8; 4 << 20];
    last.write_file("/big", &big).unwrap();
    assert_eq!(last.read_file("/big").unwrap(), big);
    for (i, fs) in clients.iter().enumerate() {
        assert_eq!(fs.read_file(format!("/f{i}")).unwrap(), b"hello");
    }
}

/// Right after files are deleted from a pool whose metadata pages ran out, a write that
/// needs one succeeds at once. Its commit's own epoch pin (an append, not of whole pages)
/// held back the pages the deletes had just retired, and the server found no room; the
/// write now starts again once with a newer pin. (Found by probing: the same append 0.1 s
/// later succeeded.)
#[test]
fn a_write_right_after_deletes_on_a_full_pool_succeeds() {
    let d = Daemon::start("reserve-deleted", 16 << 20);
    let fs = Fs::connect(&d.socket).unwrap();
    let options = engram_core::OpenOptions::new().write(true).create(true);
    let mut files = Vec::new();
    for i in 0..20 {
        let f = fs.open_file(format!("/small{i}"), &options).unwrap();
        f.write_at(&[1u8; 20_000], 0).unwrap();
        files.push(f);
    }
    let mut made = 0;
    while fs.write_file(format!("/big{made}"), &[2u8; 40_000]).is_ok() {
        made += 1;
    }
    // Growing past 7 pages needs a metadata page: none is left.
    let grown = files
        .iter()
        .filter(|f| f.write_at(&[3u8; 20_000], 20_000).is_ok())
        .count();
    assert!(grown < files.len(), "{grown} of {} grew", files.len());
    for i in 0..made {
        fs.unlink(format!("/big{i}")).unwrap();
    }
    for (i, f) in files.iter().enumerate() {
        f.write_at(&[4u8; 20_000], 40_000)
            .unwrap_or_else(|e| panic!("small{i}: {e}"));
    }
}

/// Thirty clients that each write a little and keep their file open hold at most a third
/// of a small pool in reservations: another client can still write most of it. Each took
/// a sixteenth of what was free, and together they held 86%, so another writer got ENOSPC
/// with 240 KB of data in 16 MiB (found by probing).
#[test]
fn idle_writers_hold_little_of_a_small_pool() {
    let d = Daemon::start("reserve-idle", 16 << 20);
    let options = engram_core::OpenOptions::new().write(true).create(true);
    let clients: Vec<Fs> = (0..30).map(|_| Fs::connect(&d.socket).unwrap()).collect();
    let _open: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, fs)| {
            let f = fs.open_file(format!("/f{i}"), &options).unwrap();
            f.write_at(&[1u8; 5000], 0).unwrap();
            f
        })
        .collect();
    let last = Fs::connect(&d.socket).unwrap();
    let f = last.open_file("/big", &options).unwrap();
    let chunk = vec![2u8; 256 << 10];
    let mut written = 0u64;
    while f.write_at(&chunk, written).is_ok() {
        written += chunk.len() as u64;
    }
    let blocks = last.statfs().unwrap().blocks * 4096;
    assert!(
        written * 3 > blocks * 2,
        "{written} bytes written of a pool of {blocks} data bytes"
    );
}

/// A client that keeps reserving pages without writing holds a quarter of a small pool at
/// most (ENOSPC after that), and another client still writes. Before, it took every free
/// page, and root's 1 MiB write got ENOSPC in an empty pool (found by fuzzing the daemon).
#[test]
fn one_client_cannot_reserve_the_whole_pool() {
    use engram_core::request::{Request, Response};
    let d = Daemon::start("reserve-hoard", 64 << 20);
    let hoarder = Fs::connect(&d.socket).unwrap();
    let remote = hoarder.remote().unwrap();
    let mut held = 0u64;
    let mut refused = false;
    for _ in 0..1000 {
        match remote.call(&Request::Reserve { pages: 4096 }) {
            Ok(Response::Pages(p)) => held += p.len() as u64,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                refused = true;
                break;
            }
            Ok(other) => panic!("unexpected answer {other:?}"),
        }
    }
    let data_pages = hoarder.mount_info().geometry.data_pages;
    assert!(refused, "1000 reservations were all granted");
    assert!(
        held <= data_pages / 4,
        "one client holds {held} of {data_pages} pages"
    );
    let other = Fs::connect(&d.socket).unwrap();
    let big = vec![5u8; 16 << 20];
    other.write_file("/big", &big).unwrap();
    assert_eq!(other.read_file("/big").unwrap(), big);
}
