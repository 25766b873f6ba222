use super::*;

#[test]
fn coalesce_runs() {
    let mut e = Vec::new();
    coalesce(
        &mut [(16, 4096), (8, 0), (24, 8192), (32, 12288), (48, 7)],
        &mut e,
    );
    assert_eq!(
        e,
        vec![
            Entry::Seq {
                off: 8,
                count: 4,
                start: 0,
                step: 4096
            },
            Entry::set64(48, 7)
        ]
    );
}

#[test]
fn heights() {
    assert_eq!(height_for(0), 0);
    assert_eq!(height_for(1), 1);
    assert_eq!(height_for(511), 1);
    assert_eq!(height_for(512), 2);
}
