//! A test program for the idlepool_task crate's float formatting
//! (examples/guests_test.go). It writes params.n doubles drawn from
//! params.seed, formatted by format_f64, as one JSON array; the test draws
//! the same doubles in Go and compares with encoding/json's bytes.

use idlepool_task::{format_f64, Error, Task};

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e3779b97f4a7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// The test's double number i, as fmtfloat.c draws it.
fn draw(x: &mut u64, i: i64) -> f64 {
    let b = splitmix64(x);
    let mut bits = match i % 4 {
        0 => b,
        1 => b & !((1u64 << 52) - 1),
        2 => (if i % 8 == 2 { 1e-6f64 } else { 1e21 }).to_bits().wrapping_add(b % 41).wrapping_sub(20),
        _ => return (b % (1 << 20)) as f64 / 1024.0 * if b >> 63 != 0 { -1.0 } else { 1.0 },
    };
    if (bits >> 52 & 0x7ff) == 0x7ff {
        bits &= !(1u64 << 62);
    }
    f64::from_bits(bits)
}

fn main() {
    let t = match Task::read().and_then(|t| Ok((t.param_i64("n")?.unwrap_or(0), t.seed))) {
        Ok(t) => t,
        Err(e) => {
            let e: Error = e;
            eprintln!("error: {}", e);
            std::process::exit(1)
        }
    };
    let (n, mut x) = t;
    let mut out = String::from("[");
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format_f64(draw(&mut x, i)).unwrap());
    }
    println!("{}]", out);
}
