//! The pi example (examples/pi) in Rust. It throws params.samples uniform
//! points into the unit square and counts those strictly inside the quarter
//! disc, with the same generator and the same arithmetic as the Go program,
//! so a task gives the same bytes in both:
//!
//! ```text
//! {"inside":785412,"samples":1000000}
//! ```
//!
//! Each sample is one 64-bit draw of SplitMix64 seeded with the task seed:
//! its high and low 32 bits are x and y in
//! units of 2^-32, and the point is inside exactly when x² + y² < 2^64,
//! that is when the 64-bit sum does not carry.

use idlepool_task::{Error, Object, SplitMix, Task};

/// How many of samples points fall inside the quarter disc.
fn count_inside(seed: u64, samples: i64) -> i64 {
    let mut rng = SplitMix::new(seed);
    let mut outside: u64 = 0;
    for _ in 0..samples {
        let r = rng.u64();
        let (x, y) = (r >> 32, r & 0xffff_ffff);
        let (_, carry) = (x * x).overflowing_add(y * y);
        outside += carry as u64;
    }
    samples - outside as i64
}

fn compute(t: &Task) -> Result<Object, Error> {
    let samples = t.param_i64("samples")?.unwrap_or(0);
    if samples <= 0 {
        return Err(Error::new(format!("params.samples must be a positive integer, got {}", samples)));
    }
    let mut out = Object::new();
    out.i64("inside", count_inside(t.seed, samples)).i64("samples", samples);
    Ok(out)
}

fn main() {
    std::process::exit(idlepool_task::run(compute))
}
