use super::*;

#[test]
fn requests_round_trip_and_garbage_is_refused() {
    let h = Handle {
        ino: 7,
        generation: 3,
    };
    let reqs = vec![
        Request::Create {
            parent: h,
            name: b"x".to_vec(),
            mode: 0o644,
            excl: true,
            open: Some(true),
        },
        Request::Rename {
            from: h,
            from_name: b"a".to_vec(),
            to: h,
            to_name: b"b".to_vec(),
            flags: 2,
        },
        Request::SetAttr {
            target: h,
            attr: SetAttr {
                mode: Some(1),
                size: Some(9),
                mtime: Some(SetTime::Ns(-5)),
                ..SetAttr::default()
            },
        },
        Request::SetAttr {
            target: h,
            attr: SetAttr {
                chown: true,
                through_open_file: true,
                ..SetAttr::default()
            },
        },
        Request::SetAttr {
            target: h,
            attr: SetAttr {
                written: true,
                ..SetAttr::default()
            },
        },
        Request::CommitWrite {
            target: h,
            pages: vec![(1, 2), (3, 4)],
            end: 99,
            check: Some(WriteCheck {
                old_pages: vec![0, 8],
                size_seen: 5,
                start: 1,
                in_place: vec![(7, 16)],
            }),
        },
        Request::Unreserve {
            pages: vec![1, 2, 3],
        },
        Request::Open {
            target: h,
            write: true,
        },
        Request::Close {
            target: h,
            write: false,
        },
        Request::Stats,
        Request::Mapped {
            target: h,
            on: true,
        },
        Request::Gone { pid: 4242 },
        Request::CredsChanged,
        Request::Clear {
            target: h,
            offset: 5,
            len: 6,
            how: Clear::PunchHole,
        },
        Request::Clear {
            target: h,
            offset: 5,
            len: 6,
            how: Clear::ZeroRange { keep_size: false },
        },
        Request::Clear {
            target: h,
            offset: 5,
            len: 6,
            how: Clear::ZeroRange { keep_size: true },
        },
        Request::Mknod {
            parent: h,
            name: b"fifo".to_vec(),
            mode: libc::S_IFCHR | 0o640,
            rdev: u64::MAX,
        },
    ];
    assert_eq!(
        decode_request(&encode_gone(4242)).unwrap(),
        Request::Gone { pid: 4242 }
    );

    for r in reqs {
        let mut w = Writer::default();
        encode_request(&r, &mut w);
        assert_eq!(decode_request(&w.0).unwrap(), r);
        for cut in 0..w.0.len() {
            assert!(decode_request(&w.0[..cut]).is_err());
        }
    }
    assert!(
        decode_request(&[10, 0xff, 0xff, 0xff, 0x7f]).is_err(),
        "huge count must not allocate"
    );
    assert!(decode_request(&[200]).is_err());
    let mut w = Writer::default();
    encode_request(
        &Request::Clear {
            target: h,
            offset: 0,
            len: 1,
            how: Clear::PunchHole,
        },
        &mut w,
    );
    *w.0.last_mut().unwrap() = 3;
    assert!(decode_request(&w.0).is_err(), "an unknown way to clear");
}

#[test]
fn replies_round_trip_and_garbage_is_refused() {
    let replies = vec![
        Ok(Response::Done),
        Ok(Response::Entry {
            handle: Handle {
                ino: 9,
                generation: 2,
            },
            created: true,
        }),
        Ok(Response::Pages(vec![4, 5, 6])),
        Ok(Response::Committed { mapped: false }),
        Ok(Response::Committed { mapped: true }),
        Ok(Response::Stats(ServerStats {
            records: 1,
            checkpoints: 2,
            log_wraps: 3,
        })),
        Err(Error::with_msg(libc::ENOSPC, "full")),
    ];
    for r in replies {
        let mut w = Writer::default();
        encode_reply(&r, &mut w);
        assert_eq!(decode_reply(&w.0), r);
        if r.is_ok() {
            for cut in 0..w.0.len() {
                assert!(decode_reply(&w.0[..cut]).is_err(), "{r:?} cut at {cut}");
            }
        }
    }
    // A commit's answer is one bit: any other byte is refused, not taken for "mapped".
    let mut w = Writer::default();
    encode_reply(&Ok(Response::Committed { mapped: true }), &mut w);
    *w.0.last_mut().unwrap() = 2;
    assert!(decode_reply(&w.0).is_err());
    // Nothing after it either.
    w.0.pop();
    w.0.extend_from_slice(&[0, 0]);
    assert!(decode_reply(&w.0).is_err());
    assert!(decode_reply(&[200]).is_err());
}
