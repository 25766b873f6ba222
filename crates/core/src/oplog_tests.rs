use super::*;

fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn encoded(e: &Entry) -> Vec<u8> {
    let mut got = vec![0u8; e.encoded_len()];
    let mut out = got.chunks_exact_mut(8);
    e.encode(&mut out);
    assert!(
        out.next().is_none(),
        "{e:?} encodes shorter than its length"
    );
    got
}

/// The lines written back while `apply` runs and at a final flush, each with the
/// contents it was written back with, in order.
fn written_back(pool: &Pool, apply: impl FnOnce(&mut Unflushed)) -> Vec<(u64, [u8; 64])> {
    use engram_pmem::Event;
    pool.start_recording();
    let mut lines = Unflushed::default();
    apply(&mut lines);
    lines.flush(pool);
    let rec = pool.stop_recording().unwrap();
    let flushes = rec.events.iter().map(|e| match e {
        Event::Flush { line, data } => (*line, *data),
        other => panic!("unexpected {other:?}"),
    });
    let flushes: Vec<_> = flushes.collect();
    // Whatever the order, each line's last write-back holds its final contents.
    let last: std::collections::HashMap<u64, [u8; 64]> = flushes.iter().copied().collect();
    for (line, data) in last {
        assert_eq!(data, pool.read_array::<64>(line), "line {line:#x}");
    }
    flushes
}

/// `apply_all` writes back exactly the lines its entries stored to, each once, the last
/// time with their final contents; more runs than it keeps are still written back.
#[test]
fn apply_all_writes_back_each_line_stored_to_once() {
    let pool = Pool::anonymous(1 << 20).unwrap();
    let entries = vec![
        Entry::set64(0x1008, 1),
        Entry::set64(0x1010, 2),
        Entry::Seq {
            off: 0x1038,
            count: 3,
            start: 7,
            step: 1,
        },
        Entry::short(0x4001, b"abc"),
        Entry::set32(0x1000, 3),
        Entry::set64(0x4008, 5),
    ];
    let flushes = written_back(&pool, |l| apply_all(&pool, &entries, l));
    let mut lines: Vec<u64> = flushes.iter().map(|f| f.0).collect();
    lines.sort_unstable();
    assert_eq!(lines, [0x1000, 0x1040, 0x4000]);
}

/// More distinct lines than the runs kept: all are written back, the older half of the
/// runs when a line finds none free; a line stored to again after that goes back once
/// more.
#[test]
fn apply_all_writes_back_the_older_runs_when_they_are_all_taken() {
    let pool = Pool::anonymous(1 << 20).unwrap();
    let far = |i: u64| 0x8000 + i * 0x400;
    let (runs, half) = (Unflushed::RUNS as u64, Unflushed::RUNS / 2);
    let count = runs + 3;
    let mut entries: Vec<Entry> = (0..count).map(|i| Entry::set64(far(i), i + 1)).collect();
    entries.push(Entry::set64(far(0), 98));
    let flushes = written_back(&pool, |l| apply_all(&pool, &entries, l));
    let lines: Vec<u64> = flushes.iter().map(|f| f.0).collect();
    // The oldest half of the runs went back together when line RUNS came.
    let oldest: Vec<u64> = (0..half as u64).map(far).collect();
    assert_eq!(lines[..half], oldest);
    let mut rest = lines[half..].to_vec();
    rest.sort_unstable();
    let mut want: Vec<u64> = (half as u64..count).map(far).collect();
    want.push(far(0));
    want.sort_unstable();
    assert_eq!(rest, want);
}

/// A line stored to by every record, among ever new lines (a directory's inode among
/// its new entries): it stays among the runs searched and out of the older half, so
/// it goes back once, at the end, however many runs were written back meanwhile.
#[test]
fn a_line_stored_to_again_and_again_stays_unflushed() {
    let pool = Pool::anonymous(1 << 20).unwrap();
    let hot = 0x1000;
    let records = 3 * Unflushed::RUNS as u64;
    let flushes = written_back(&pool, |l| {
        for i in 0..records {
            let record = [Entry::set64(hot, i), Entry::set64(0x8000 + i * 0x400, i)];
            apply_all(&pool, &record, l);
        }
    });
    let hot_flushes = flushes.iter().filter(|f| f.0 == hot).count();
    assert_eq!(hot_flushes, 1);
    assert_eq!(flushes.len() as u64, records + 1);
}

/// Records that store to the same lines again (an inode's times, an index leaf) leave
/// each line to be written back once, not once per record.
#[test]
fn lines_stored_to_by_several_records_are_written_back_once() {
    let pool = Pool::anonymous(1 << 20).unwrap();
    let record = |i: u64| vec![Entry::set64(0x1008, i), Entry::set64(0x2000 + 8 * i, i)];
    let flushes = written_back(&pool, |l| {
        for i in 0..5 {
            apply_all(&pool, &record(i), l);
        }
    });
    let mut lines: Vec<u64> = flushes.iter().map(|f| f.0).collect();
    lines.sort_unstable();
    assert_eq!(lines, [0x1000, 0x2000]);
}

/// The log format must not change: entries encode to these exact words, `Short`
/// exactly as the `Bytes` entry it stands for, and decode back.
#[test]
fn entries_encode_as_the_log_format_says_and_decode_back() {
    let golden = [
        (
            Entry::set64(0x1000, 7),
            words(&[0x1000 | 8 << 48 | 1 << 56, 7]),
        ),
        (
            Entry::set32(0x2008, 9),
            words(&[0x2008 | 4 << 48 | 1 << 56, 9]),
        ),
        (
            Entry::Seq {
                off: 0x3000,
                count: 2,
                start: 5,
                step: 0,
            },
            words(&[0x3000 | 2 << 56, 2, 5, 0]),
        ),
        (
            Entry::Bytes {
                off: 0x4001,
                data: (1..=10).collect(),
            },
            words(&[0x4001 | 3 << 56, 10, 0x0807_0605_0403_0201, 0x0a09]),
        ),
        (
            Entry::short(0x5003, &[0xfe, 0xff, 0xff]),
            words(&[0x5003 | 3 << 56, 3, 0xff_fffe]),
        ),
    ];
    for (e, want) in &golden {
        assert_eq!(&encoded(e), want, "{e:?}");
        assert_eq!(Entry::decode(want), Some((e.clone(), want.len())));
    }
    for n in 1..=8u8 {
        let data: Vec<u8> = (1..=n).collect();
        let short = Entry::short(0x6000 + n as u64, &data);
        let bytes = Entry::Bytes {
            off: 0x6000 + n as u64,
            data,
        };
        assert_eq!(encoded(&short), encoded(&bytes));
        assert_eq!(Entry::decode(&encoded(&bytes)), Some((short, 24)));
    }
}
