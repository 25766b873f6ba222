//! PNG bar charts, one per group: a bar per target for each row, scaled to the row's
//! largest value, with the value written beside it. Drawn into an RGB buffer with an 8×8
//! bitmap font and encoded by hand (zlib from miniz_oxide): no system libraries.

use crate::Group;
use crate::report::Report;
use std::path::Path;

/// Cool colours for the EngramFS front ends, warm ones (then grey) for the baselines.
const ENGRAM_COLOURS: [[u8; 3]; 4] = [
    [31, 119, 180],
    [110, 170, 220],
    [23, 190, 207],
    [148, 103, 189],
];
const BASELINE_COLOURS: [[u8; 3]; 4] = [
    [255, 127, 14],
    [214, 39, 40],
    [188, 189, 34],
    [127, 127, 127],
];

fn colours(r: &Report, cols: &[String]) -> Vec<[u8; 3]> {
    let (mut e, mut b) = (0, 0);
    cols.iter()
        .map(|c| {
            if r.is_engram(c) {
                e += 1;
                ENGRAM_COLOURS[(e - 1) % ENGRAM_COLOURS.len()]
            } else {
                b += 1;
                BASELINE_COLOURS[(b - 1) % BASELINE_COLOURS.len()]
            }
        })
        .collect()
}
const BLACK: [u8; 3] = [20, 20, 20];
const GREY: [u8; 3] = [200, 200, 200];

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Canvas {
        Canvas {
            w,
            h,
            px: vec![255; w * h * 3],
        }
    }

    fn rect(&mut self, x: usize, y: usize, w: usize, h: usize, c: [u8; 3]) {
        for yy in y..(y + h).min(self.h) {
            for xx in x..(x + w).min(self.w) {
                let i = (yy * self.w + xx) * 3;
                self.px[i..i + 3].copy_from_slice(&c);
            }
        }
    }

    /// Draw ASCII text (other characters as '?') with its top left at (x, y).
    fn text(&mut self, x: usize, y: usize, s: &str, c: [u8; 3], scale: usize) {
        for (k, ch) in s.chars().enumerate() {
            let ch = match ch {
                'µ' => 'u',
                '×' => 'x',
                '·' => '-',
                c if c.is_ascii() => c,
                _ => '?',
            };
            let glyph = font8x8::legacy::BASIC_LEGACY[ch as usize];
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) != 0 {
                        let gx = x + (k * 8 + col) * scale;
                        self.rect(gx, y + row * scale, scale, scale, c);
                    }
                }
            }
        }
    }

    fn png(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity((self.w * 3 + 1) * self.h);
        for row in self.px.chunks(self.w * 3) {
            raw.push(0); // filter: none
            raw.extend_from_slice(row);
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&(self.w as u32).to_be_bytes());
        ihdr.extend_from_slice(&(self.h as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
        chunk(&mut out, b"IHDR", &ihdr);
        chunk(
            &mut out,
            b"IDAT",
            &miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6),
        );
        chunk(&mut out, b"IEND", &[]);
        out
    }
}

fn crc32(parts: &[&[u8]]) -> u32 {
    let mut table = [0u32; 256];
    for (n, e) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *e = c;
    }
    let mut c = !0u32;
    for p in parts {
        for &b in *p {
            c = table[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
        }
    }
    !c
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

fn render(r: &Report, group: Group) -> Option<Canvas> {
    let rows: Vec<_> = r.rows.iter().filter(|x| x.group == group).collect();
    let cols = r.columns(group);
    if rows.is_empty() || cols.is_empty() {
        return None;
    }
    let colour = colours(r, &cols);
    const BAR_H: usize = 10;
    const BAR_W: usize = 420;
    const ROW_GAP: usize = 10;
    let labels: Vec<String> = rows
        .iter()
        .map(|x| format!("{} ({} thr, {})", x.bench, x.threads, x.unit.label()))
        .collect();
    let label_w = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) * 8 + 16;
    let top = 70;
    let row_h = |x: &crate::Row| x.values.iter().filter(|v| v.1.is_ok()).count().max(1);
    let height = top
        + rows
            .iter()
            .map(|x| row_h(x) * (BAR_H + 2) + ROW_GAP)
            .sum::<usize>()
        + 10;
    let width = (10 + label_w + BAR_W + 100).max(10 + group.title().len() * 16 + 10);
    let mut c = Canvas::new(width, height);
    c.text(10, 8, group.title(), BLACK, 2);
    let lower = rows.iter().any(|x| !x.unit.higher_is_better());
    let sub = if lower {
        "bars scaled to each row's largest value; lower is better"
    } else {
        "bars scaled to each row's largest value; higher is better"
    };
    c.text(10, 30, sub, BLACK, 1);
    let mut lx = 10;
    for (i, col) in cols.iter().enumerate() {
        c.rect(lx, 48, 10, 10, colour[i]);
        c.text(lx + 14, 49, col, BLACK, 1);
        lx += 14 + col.len() * 8 + 16;
    }
    let mut y = top;
    for (row, label) in rows.iter().zip(&labels) {
        let max = row
            .values
            .iter()
            .filter_map(|v| v.1.as_ref().ok().copied())
            .fold(0.0, f64::max);
        let h = row_h(row) * (BAR_H + 2);
        c.text(10, y + h / 2 - 4, label, BLACK, 1);
        c.rect(10 + label_w - 4, y, 1, h, GREY);
        let mut by = y;
        for (i, col) in cols.iter().enumerate() {
            let Some(v) = row.get(col) else { continue };
            let len = ((v / max) * BAR_W as f64).round().max(1.0) as usize;
            let x0 = 10 + label_w;
            c.rect(x0, by, len, BAR_H, colour[i]);
            c.text(x0 + len + 4, by + 1, &row.unit.format(v), BLACK, 1);
            by += BAR_H + 2;
        }
        y += h + ROW_GAP;
    }
    Some(c)
}

/// Write `<group>.png` for each group with results; returns how many were written.
pub fn write_all(r: &Report, dir: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let groups = [
        Group::Micro,
        Group::Bandwidth,
        Group::Personality,
        Group::Apps,
        Group::Scaling,
        Group::Recovery,
    ];
    let mut n = 0;
    for g in groups {
        if let Some(c) = render(r, g) {
            let path = dir.join(format!("{}.png", g.id()));
            std::fs::write(&path, c.png())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            n += 1;
        }
    }
    Ok(n)
}
