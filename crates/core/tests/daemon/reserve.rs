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
