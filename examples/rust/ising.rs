//! The Ising example (examples/ising) in Rust: single-spin-flip Metropolis
//! on a periodic L×L lattice (J = 1, k_B = 1, no field), the same
//! algorithm, generator and order of floating-point operations as the Go
//! program, so a task gives the same bytes in both:
//!
//! ```text
//! {"T":2.25,"rep":0,"energy":-1.45,"abs_m":0.63,"chi":14.1}
//! ```
//!
//! Task params: T (temperature, > 0), L (lattice side, >= 2), burnin and
//! sweeps (sweeps discarded, then measured), rep (echoed back).

use idlepool_task::{format_f64, Error, Object, Pcg, Task};

/// The second PCG seed word; the first is the task seed.
const PCG_STREAM: u64 = 0x2545f4914f6cdd1d;
/// Bounds L; sweeps·L⁴ must also fit an i64 (the sum of M²).
const MAX_SIDE: i64 = 4096;

/// Go's math.Exp as Go computes it without assembly (its pure-Go exp,
/// which GOARCH=wasm runs: FreeBSD's e_exp.c), so that the acceptance
/// thresholds are the same bits as the Go program's.
fn go_exp(x: f64) -> f64 {
    const LN2_HI: f64 = 6.93147180369123816490e-01;
    const LN2_LO: f64 = 1.90821492927058770002e-10;
    const LOG2E: f64 = 1.44269504088896338700e+00;
    const OVERFLOW: f64 = 7.09782712893383973096e+02;
    const UNDERFLOW: f64 = -7.45133219101941108420e+02;
    const NEAR_ZERO: f64 = 1.0 / (1u64 << 28) as f64;
    const P1: f64 = 1.66666666666666657415e-01;
    const P2: f64 = -2.77777777770155933842e-03;
    const P3: f64 = 6.61375632143793436117e-05;
    const P4: f64 = -1.65339022054652515390e-06;
    const P5: f64 = 4.13813679705723846039e-08;
    if x.is_nan() {
        return x;
    }
    if x > OVERFLOW {
        return f64::INFINITY;
    }
    if x < UNDERFLOW {
        return 0.0;
    }
    if -NEAR_ZERO < x && x < NEAR_ZERO {
        return 1.0 + x;
    }
    let k: i32 = if x < 0.0 {
        (LOG2E * x - 0.5) as i32
    } else if x > 0.0 {
        (LOG2E * x + 0.5) as i32
    } else {
        0
    };
    let hi = x - k as f64 * LN2_HI;
    let lo = k as f64 * LN2_LO;
    let r = hi - lo;
    let t = r * r;
    let c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    ldexp(y, k)
}

/// y·2^k, exact where the result is a normal number (as Go's Ldexp).
fn ldexp(mut y: f64, mut k: i32) -> f64 {
    while k > 1000 {
        y *= 2f64.powi(1000);
        k -= 1000;
    }
    while k < -1000 {
        // Below the normal range Go rounds once; two steps can round twice
        // only for results under 2^-1022, which no threshold here reaches.
        y *= 2f64.powi(-1000);
        k += 1000;
    }
    y * 2f64.powi(k)
}

/// The state of one Metropolis run.
struct Lattice {
    side: usize,
    spins: Vec<i32>, // ±1, row-major
    thr: [u32; 3],   // thr[dE/4] is exp(-dE/T) scaled to 2^32, dE = 4, 8
    rng: Pcg,
    draw: u64, // holds 32 unused random bits when half is set
    half: bool,
    energy: i64, // E = -Σ s_i s_j over the 2N bonds
    mag: i64,    // M = Σ s_i
}

impl Lattice {
    /// Attempts one flip per site, in lattice order; each 64-bit draw
    /// serves two decisions, low half first. The generator's state is
    /// copied into a local, which WebAssembly keeps out of its
    /// bounds-checked linear memory.
    fn sweep(&mut self) {
        let mut rng = self.rng.clone();
        let l = self.side;
        let (thr1, thr2) = (self.thr[1], self.thr[2]);
        let (mut draw, mut half) = (self.draw, self.half);
        let (mut energy, mut mag) = (self.energy, self.mag);
        let spins = &mut self.spins[..];
        for r in 0..l {
            let (up, down) = (((r + l - 1) % l) * l, ((r + 1) % l) * l);
            let row = r * l;
            for c in 0..l {
                let left = if c == 0 { l - 1 } else { c - 1 };
                let right = if c == l - 1 { 0 } else { c + 1 };
                let s = spins[row + c];
                let de = 2 * s * (spins[row + left] + spins[row + right] + spins[up + c] + spins[down + c]);
                if de > 0 {
                    let u;
                    if half {
                        u = (draw >> 32) as u32;
                        half = false;
                    } else {
                        draw = rng.u64();
                        u = draw as u32;
                        half = true;
                    }
                    if u >= if de == 4 { thr1 } else { thr2 } {
                        continue;
                    }
                }
                spins[row + c] = -s;
                energy += de as i64;
                mag -= 2 * s as i64;
            }
        }
        self.rng = rng;
        self.draw = draw;
        self.half = half;
        self.energy = energy;
        self.mag = mag;
    }
}

fn compute(t: &Task) -> Result<Object, Error> {
    let temp = t.param_f64("T")?.unwrap_or(0.0);
    let l = t.param_i64("L")?.unwrap_or(0);
    let burnin = t.param_i64("burnin")?.unwrap_or(0);
    let sweeps = t.param_i64("sweeps")?.unwrap_or(0);
    let rep = t.param_i64("rep")?.unwrap_or(0);
    if !(temp > 0.0) || temp > 1e6 {
        return Err(Error::new(format!("params.T must be a temperature in (0, 1e6], got {}", format_f64(temp).unwrap_or_default())));
    }
    if !(2..=MAX_SIDE).contains(&l) {
        return Err(Error::new(format!("params.L must be in [2, {}], got {}", MAX_SIDE, l)));
    }
    if sweeps < 1 {
        return Err(Error::new(format!("params.sweeps must be at least 1, got {}", sweeps)));
    }
    if burnin < 0 {
        return Err(Error::new(format!("params.burnin must not be negative, got {}", burnin)));
    }
    if sweeps > i64::MAX / (l * l * l * l) {
        return Err(Error::new(format!("params.sweeps = {} on a {}×{} lattice would overflow the sum of M²", sweeps, l, l)));
    }

    // All spins up: the ordered start settles quickly below Tc.
    let n = l * l;
    let mut lat = Lattice {
        side: l as usize,
        spins: vec![1; n as usize],
        thr: [0; 3],
        rng: Pcg::new(t.seed, PCG_STREAM),
        draw: 0,
        half: false,
        energy: -2 * n,
        mag: n,
    };
    for k in 1..=2 {
        lat.thr[k] = (go_exp(-4.0 * k as f64 / temp) * 4294967296.0) as u32;
    }
    for _ in 0..burnin {
        lat.sweep();
    }
    let (mut sum_e, mut sum_abs_m, mut sum_m2) = (0i64, 0i64, 0i64);
    for _ in 0..sweeps {
        lat.sweep();
        sum_e += lat.energy;
        sum_abs_m += lat.mag.abs();
        sum_m2 += lat.mag * lat.mag;
    }
    let (fn_, fs) = (n as f64, sweeps as f64);
    let abs_m = sum_abs_m as f64 / fs / fn_;
    let m2 = sum_m2 as f64 / fs / (fn_ * fn_);
    let mut out = Object::new();
    out.f64("T", temp)
        .i64("rep", rep)
        .f64("energy", sum_e as f64 / fs / fn_)
        .f64("abs_m", abs_m)
        .f64("chi", fn_ * (m2 - abs_m * abs_m) / temp);
    Ok(out)
}

fn main() {
    std::process::exit(idlepool_task::run(compute))
}
